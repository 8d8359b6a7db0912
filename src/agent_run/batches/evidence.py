"""What a finished run is judged on: its evidence (worker-tool reports, the re-hashed answer,
the commits on its branch) and the workflow's post-success `verify_command`, run in the run's
folder with the engines' command environment (never the daemon's keys)."""

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from agent_run.batches.workflows import Evidence
from agent_run.engines.environment import command_environment
from agent_run.engines.sandbox import SandboxUnavailable, command_argv, require_sandbox
from agent_run.services.integrity import verified_answer
from agent_run.store import agents as agents_q
from agent_run.store import reports as reports_q
from agent_run.system import git
from agent_run.system.home import Home

VERIFY_OUTPUT_BYTES = 20_000


def evidence_for(
    conn: sqlite3.Connection, home: Home, batch: sqlite3.Row, run: sqlite3.Row
) -> Evidence:
    reports: dict[str, list[dict[str, Any]]] = {}
    for execution in conn.execute(
        "SELECT id FROM executions WHERE agent_id = ? ORDER BY number", (run["agent_id"],)
    ).fetchall():
        for report in reports_q.reports(conn, execution["id"]):
            reports.setdefault(report["tool"], []).append(json.loads(report["payload"]))
    latest = agents_q.latest_execution(conn, run["agent_id"])
    # Only a re-hashed answer is judged; a tampered one raises AnswerIntegrity (recorded).
    answer = verified_answer(conn, home, latest, "batch judge") if latest["answer_sha256"] else None
    commits = git.commits_since(Path(run["worktree"]), batch["base_sha"]) if run["worktree"] else []
    return Evidence(answer=answer, reports=reports, commits=commits)


def run_verify(
    command: str, workdir: str, timeout: float, home: Home, sandbox: bool = True
) -> tuple[bool, str]:
    """The command in the same kind of sandbox as its agent's engine (unless its runtime says
    `sandbox = "none"`), with the allowlisted environment; refused when no sandbox can start.
    On a timeout bwrap is killed, and the sandbox with it (`--die-with-parent`)."""
    argv = ["/bin/sh", "-c", command]
    if sandbox:
        try:
            require_sandbox()
        except SandboxUnavailable as exc:
            return False, f"verify_command not run: {exc.message}"
        argv = command_argv(command, workdir, home.root)
    try:
        done = subprocess.run(
            argv,
            cwd=workdir,
            capture_output=True,
            text=True,
            errors="replace",  # bytes that are not UTF-8 show as U+FFFD
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=command_environment(),
        )  # never the daemon's keys
    except subprocess.TimeoutExpired:
        return False, f"verify_command timed out after {timeout:g}s"
    output = (done.stdout + done.stderr)[-VERIFY_OUTPUT_BYTES:]
    return done.returncode == 0, f"exit {done.returncode}\n{output}"


def agent_sandboxed(conn: sqlite3.Connection, agent_id: str | None) -> bool:
    """Whether the run's agent ran sandboxed: its runtime's `sandbox` (by default, yes)."""
    execution = agents_q.latest_execution(conn, agent_id) if agent_id else None
    if execution is None:
        return True
    config = json.loads(execution["plan_json"]).get("runtime_config") or {}
    return bool(config.get("sandbox", "bubblewrap") != "none")
