"""Real git repositories in temp folders for batch tests, waiting on batch states, and the
`batch_project` fixture's `BatchProject`: a daemon and a fresh repository to run batches in."""

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import DaemonProcess, short_tmpdir

GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(files: dict[str, str] | None = None) -> Path:
    """A repository on branch `main` with one commit, in its own temp parent folder."""
    repo = short_tmpdir("arg-") / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name, content in (files or {"README.md": "# project\n"}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def wait_batch(
    daemon: DaemonProcess,
    batch_id: str,
    states: tuple[str, ...] = ("completed", "failed", "cancelled", "blocked"),
    timeout: float = 120,
) -> dict[str, Any]:
    """Long-poll until the batch reaches one of `states`; fail after a generous bound."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        batch = daemon.call("batch", {"batch_id": batch_id})
        if batch["state"] in states:
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(
                f"batch still {batch['state']} after {timeout}s: {batch['counts']}"
            )
        daemon.call(
            "list_agents", {"after_revision": batch["revision"], "wait_seconds": 5, "limit": 1}
        )


def runs_of(batch: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    return [r for r in batch["runs"] if r["stage"] == stage]


# A candidate that writes a file and commits it (the demo engine's directives).
CANDIDATE = "write: feature.txt = a feature\ncommit: add the feature"
SETTLED = ("completed", "failed", "cancelled", "blocked")


@dataclass
class BatchProject:
    """A running daemon and a fresh repository (branch `main`, one commit) whose runs' worktrees
    go beside it; batches run on the demo engine. The `batch_project` fixture removes it all."""

    daemon: DaemonProcess
    repo: Path

    def start(self, workflow: str, **params: Any) -> dict[str, Any]:
        """`batch_start` of `workflow` on this repository (params may name another project)."""
        return self.daemon.call(
            "batch_start",
            {"runtime": "demo", "workflow": workflow, "project": str(self.repo), **params},
        )

    def finish(
        self,
        workflow: str,
        *,
        states: tuple[str, ...] = SETTLED,
        timeout: float = 120,
        **params: Any,
    ) -> dict[str, Any]:
        """Start a batch and wait until it reaches one of `states`; the batch then."""
        return wait_batch(self.daemon, self.start(workflow, **params)["id"], states, timeout)

    def start_ranked_pair(self, review: str = "score: 50", **params: Any) -> dict[str, Any]:
        """A ranked batch of one committing candidate and one reviewer (`review` its prompt)."""
        return self.start(
            "ranked",
            **{"runs": 1, "reviewers": 1, "prompt": CANDIDATE, "review_prompt": review, **params},
        )
