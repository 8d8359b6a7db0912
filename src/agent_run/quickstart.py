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

from agent_run.cli_batch import render_ranking, watch_batch
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


def make_demo_repo() -> Path:
    parent = Path(tempfile.mkdtemp(prefix="agent-run-demo-"))
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
    repo = make_demo_repo()
    print(f"demo repository: {repo}")
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
    if batch.state != "completed":
        print(f"\nthe batch ended {batch.state}: {batch.state_reason}")
        return 1
    print("\n" + render_ranking(batch))
    print("\nverified answers:")
    candidates_ranked = sorted(
        (r for r in batch.runs if r.stage == "candidate"), key=lambda r: r.rank
    )
    for run in candidates_ranked:
        answer = session.call("answer", {"agent_id": run.agent_id})
        # Check the proof ourselves too: the file on disk hashes to what the daemon reports.
        on_disk = hashlib.sha256(Path(answer.path).read_bytes()).hexdigest()
        mark = "verified" if on_disk == answer.sha256 else "MISMATCH"
        print(f"  #{run.rank} {run.title}: {answer.text}")
        print(f"         sha256 {answer.sha256} ({answer.bytes} bytes, {mark})")
    winner = candidates_ranked[0]
    home = (
        ""
        if session.home.root == type(session.home).resolve().root
        else f" --home {session.home.root}"
    )
    print("\nlook further:")
    print(f"  agent-run{home} batch show {batch.id} --format text")
    print(f"  agent-run{home} batch review {batch.id} --format text")
    print(f"  agent-run{home} answer {winner.agent_id} --format text")
    print(f"  agent-run{home} transcript {winner.agent_id} --format text")
    print(
        f"  agent-run{home} batch clean {batch.id}          # preview; add --confirm --force to remove"
    )
    print("\nin the browser:")
    print(f"  agent-run{home} web --open     # prints a signed-in URL; then this batch is at")
    print(f"  http://127.0.0.1:{WEB_PORT}/batches/{batch.id}")
    return 0
