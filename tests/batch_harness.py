"""Real git repositories in temp folders for batch tests, and waiting on batch states."""

import subprocess
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
