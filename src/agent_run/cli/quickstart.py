"""`agent-run demo`: a small ranked batch on the offline demo engine, shown live.

Three candidate agents each change a fresh git repository in their own worktree and commit
through the worker tools; two read-only reviewers score each candidate; a verify command runs
in every worktree; the batch ends with the ranking and each candidate's verified answer.
"""

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent_run.cli.batch_follow import watch_batch
from agent_run.domain.batch_states import BatchState
from agent_run.system.home import Home
from agent_run.text.batch import render_ranking
from agent_run.web import DEFAULT_PORT as WEB_PORT

CANDIDATE_PROMPT = """Add a GREETING.md that greets new contributors.
steps: 5
step_seconds: 0.4
write: GREETING.md = Welcome! Read README.md, then run hello.py.
commit: Add a greeting for new contributors
answer: Added GREETING.md and committed it."""

REVIEW_PROMPT = """Is the greeting clear and friendly?
steps: 3
step_seconds: 0.3
score: auto"""


def make_demo_repo(home_root: Path) -> Path:
    """A fresh git repository in `<home>/demos/<random>/demo-project`; the batch's worktrees go
    beside it, so everything the quick start makes stays inside the agent-run home."""
    home_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    demos = Home(home_root).demos_dir
    demos.mkdir(mode=0o700, exist_ok=True)
    parent = Path(tempfile.mkdtemp(prefix="demo-", dir=demos))
    repo = parent / "demo-project"
    repo.mkdir()
    (repo / "README.md").write_text("# demo project\n")
    (repo / "hello.py").write_text('print("hello")\n')
    git = ["git", "-c", "user.name=agent-run demo", "-c", "user.email=demo@agent-run.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "-m", "initial commit"], check=True)
    return repo


def run_quickstart(session: Any, candidates: int) -> int:
    if shutil.which("git") is None:
        print("agent-run demo needs git on PATH", file=sys.stderr)
        return 1
    repo = make_demo_repo(session.home.root)
    print(f"demo repository: {repo}")
    print(
        f"  (inside the agent-run home; its worktrees go beside it; rm -rf {repo.parent} when done)"
    )
    batch = session.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(repo),
            "runs": candidates,
            "reviewers": 2,
            "concurrency": 4,
            "runtime": "demo",
            "prompt": CANDIDATE_PROMPT,
            "review_prompt": REVIEW_PROMPT,
            "verify_command": "test -s GREETING.md",
            "request_id": f"demo-{repo.parent.name}",
        },
    )
    print(
        f"started ranked batch {batch.id}: {candidates} candidates in their own worktrees, "
        "2 reviewers each, through the daemon\n"
    )
    batch = watch_batch(session, batch.id)
    if batch.state != BatchState.COMPLETED:
        print(f"\nthe batch ended {batch.state}: {batch.state_reason}")
        return 1
    print("\n" + render_ranking(batch))
    winner = _print_verified_answers(session, batch)
    _print_next_steps(session, batch.id, winner.agent_id)
    return 0


def _print_verified_answers(session: Any, batch: Any) -> Any:
    """Each candidate's answer, best first, its file re-hashed here; the winning run."""
    print("\nverified answers:")
    ranked = sorted((r for r in batch.runs if r.stage == "candidate"), key=lambda r: r.rank)
    for run in ranked:
        answer = session.call("answer", {"agent_id": run.agent_id})
        # Check the proof ourselves too: the file on disk hashes to what the daemon reports.
        on_disk = hashlib.sha256(Path(answer.path).read_bytes()).hexdigest()
        mark = "verified" if on_disk == answer.sha256 else "MISMATCH"
        print(f"  #{run.rank} {run.title}: {answer.text}")
        print(f"         sha256 {answer.sha256} ({answer.bytes} bytes, {mark})")
    return ranked[0]


def _print_next_steps(session: Any, batch_id: str, agent_id: str) -> None:
    home = (
        ""
        if session.home.root == type(session.home).resolve().root
        else f" --home {session.home.root}"
    )
    print("\nlook further:")
    print(f"  agent-run{home} batch show {batch_id} --format text")
    print(f"  agent-run{home} batch review {batch_id} --format text")
    print(f"  agent-run{home} answer {agent_id} --format text")
    print(f"  agent-run{home} transcript {agent_id} --format text")
    print(
        f"  agent-run{home} batch clean {batch_id}          # preview; add --confirm --force to remove"
    )
    print("\nin the browser:")
    print(f"  agent-run{home} web --open     # prints a signed-in URL; then this batch is at")
    print(f"  http://127.0.0.1:{WEB_PORT}/batches/{batch_id}")
