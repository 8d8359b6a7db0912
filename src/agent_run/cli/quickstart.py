"""`agent-run demo`: a small ranked batch on the offline demo engine, shown live.

Three candidate agents each change a fresh git repository in their own worktree and commit
through the worker tools; two read-only reviewers score each candidate; a verify command runs
in every worktree; the batch ends with the ranking and each candidate's verified answer.
"""

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent_run.cli.batch_follow import watch_batch
from agent_run.domain.batch_states import BatchState
from agent_run.system.home import DEFAULT_HOME, Home
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


# scripts/quickstart passes its caller's PATH on here: `uv run` puts .venv/bin first on ours,
# so `agent-run` would look found when the user's shell cannot find it.
CALLER_PATH_ENV = "AGENT_RUN_CALLER_PATH"


def agent_run_command() -> tuple[str, Path | None]:
    """How the user's shell can run this agent-run: `agent-run` when their PATH finds this one,
    else its full path (the venv's script, or this interpreter with `-m agent_run`); and the
    folder to put on PATH to type `agent-run` (None when it is there already, or there is none)."""
    script = Path(sys.executable).parent / "agent-run"  # the venv's, not the interpreter's home
    if not (script.is_file() and os.access(script, os.X_OK)):
        return f"{shlex.quote(sys.executable)} -m agent_run", None
    found = shutil.which("agent-run", path=os.environ.get(CALLER_PATH_ENV, os.environ["PATH"]))
    if found and Path(found).resolve() == script.resolve():
        return "agent-run", None
    return shlex.quote(str(script)), script.parent


def _print_next_steps(session: Any, batch_id: str, agent_id: str) -> None:
    command, folder = agent_run_command()
    default_home = Path(DEFAULT_HOME).expanduser().absolute()
    root = session.home.root
    run = command if root == default_home else f"{command} --home {shlex.quote(str(root))}"
    print("\nlook further:")
    print(f"  {run} batch show {batch_id} --format text")
    print(f"  {run} batch review {batch_id} --format text")
    print(f"  {run} answer {agent_id} --format text")
    print(f"  {run} transcript {agent_id} --format text")
    print(f"  {run} batch clean {batch_id}          # preview; add --confirm --force to remove")
    print("\nin the browser:")
    print(f"  {run} web --open     # prints a signed-in URL; then this batch is at")
    print(f"  http://127.0.0.1:{WEB_PORT}/batches/{batch_id}")
    if folder is not None:
        print("\n`agent-run` is not on your PATH, so the commands above name it in full. To type")
        print(f'just `agent-run` in this shell: export PATH={shlex.quote(str(folder))}:"$PATH"')
        print("(to keep it, add that line to ~/.profile; docs/install.md has other ways)")
