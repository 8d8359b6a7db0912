"""The worker MCP server: the tools one execution offers, bound to it by its capability token.

The supervisor serves it on each connection to its worker gate (`supervisor/worker_gate.py`,
one thread per connection); `python -m agent_run.worker_tools` serves it over stdio, bound by
its environment (the home, the execution id and the token). A call is recorded only while the
token's hash matches the execution's and the execution is live; it writes the database
directly, so it works while the daemon is down. Stdlib only (no mcp SDK, no pydantic): it runs
in every supervisor.
"""

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import IO, Any

from agent_run.domain.errors import DomainError, GitError
from agent_run.domain.states import ExecutionState
from agent_run.store.agents import get_execution
from agent_run.store.batches import branch_of_agent
from agent_run.store.db import connect, on_commit, until_unlocked, write
from agent_run.store.reports import append_report, complete_report
from agent_run.store.wake import Waker
from agent_run.worker_tools.binding import EXECUTION_ENV, HOME_ENV, TOKEN_ENV, TOOLS_ENV, token_hash
from agent_run.worker_tools.catalog import WORKER_TOOLS
from agent_run.worker_tools.stdio import ToolAnswer, serve_stdio
from agent_run.worker_tools.validation import InvalidArgument, validate


class ReportRefused(Exception):
    pass


def _bound_row(conn: sqlite3.Connection, execution_id: str, token: str) -> sqlite3.Row:
    row = get_execution(conn, execution_id)
    if row is None or row["worker_token_sha256"] != token_hash(token):
        raise ReportRefused("this worker-tools server is not bound to a known execution")
    if ExecutionState(row["state"]).terminal:
        raise ReportRefused(f"the execution already ended ({row['state']})")
    return row


def record(
    conn: sqlite3.Connection, execution_id: str, token: str, tool: str, payload: dict[str, Any]
) -> int:
    """Record a call; while another writer holds the database's lock the call waits for it
    (the engine waits for its answer), however long: a report is never lost to a busy store."""

    def attempt() -> int:
        with write(conn):
            row = _bound_row(conn, execution_id, token)
            return append_report(
                conn,
                agent_id=row["agent_id"],
                execution_id=execution_id,
                tool=tool,
                payload=payload,
            )

    return until_unlocked(attempt)


def workdir_of(conn: sqlite3.Connection, execution_id: str) -> Path:
    row = get_execution(conn, execution_id)
    return Path(json.loads(row["plan_json"])["workdir"])


def branch_of(conn: sqlite3.Connection, execution_id: str) -> str:
    """The branch agent-run made for this execution's batch run, else the plan's
    `commit_branch` (engines/plan.py): the only one it commits on."""
    row = get_execution(conn, execution_id)
    branch = branch_of_agent(conn, row["agent_id"]) or json.loads(row["plan_json"]).get(
        "commit_branch"
    )
    if not branch:
        raise GitError("create_commit is only for a batch run's agent, on the run's own branch")
    return branch


def create_commit(
    conn: sqlite3.Connection, execution_id: str, token: str, payload: dict[str, Any]
) -> tuple[int, str]:
    """Record the intent first (while the execution is live), then commit, then complete the
    report with the sha: a commit never exists without its report, whatever ends in between
    (the judge then finds the commit in git). A failed commit completes it as `failed`."""
    from agent_run.system.git import commit_files

    report_id = record(
        conn, execution_id, token, "create_commit", {**payload, "sha": None, "state": "intent"}
    )
    try:
        workdir, branch = workdir_of(conn, execution_id), branch_of(conn, execution_id)
        sha = commit_files(workdir, payload["message"], payload["files"], branch)
    except DomainError as exc:
        _complete(
            conn, report_id, {**payload, "sha": None, "state": "failed", "error": exc.message}
        )
        raise
    _complete(conn, report_id, {**payload, "sha": sha, "state": "committed"})
    return report_id, sha


def _complete(conn: sqlite3.Connection, report_id: int, payload: dict[str, Any]) -> None:
    def attempt() -> None:
        with write(conn):
            complete_report(conn, report_id, payload)

    until_unlocked(attempt)


class WorkerTools:
    """The tools one execution offers, bound to its token: listed and called by the stdio loop.
    Its database connection is opened at the first call, not before: an engine connects at its
    start and lists the tools, and most agents call one only at their end (`finish`), so until
    then a served connection holds no SQLite connection (its schema, its caches) in the
    supervisor."""

    def __init__(self, home: Path, execution_id: str, token: str, offered: list[str]) -> None:
        self.home, self.execution_id, self.token = home, execution_id, token
        self.offered = [name for name in WORKER_TOOLS if name in offered]
        self._conn: sqlite3.Connection | None = None
        self._waker: Waker | None = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self._waker = Waker(self.home / "wake.sock")
            conn = connect(self.home / "state.db", apply_migrations=False)
            on_commit(conn, self._waker.wake)  # the daemon reads each report at once
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._waker is not None:
            self._waker.close()
            self._waker = None

    def list(self) -> list[dict[str, Any]]:
        annotations = {
            "destructiveHint": False,
            "idempotentHint": False,
            "openWorldHint": False,
            "readOnlyHint": False,
        }
        return [
            {
                "annotations": annotations,
                "description": WORKER_TOOLS[name].description,
                "inputSchema": WORKER_TOOLS[name].schema,
                "name": name,
            }
            for name in self.offered
        ]

    def call(self, name: Any, arguments: Any) -> ToolAnswer:
        if not isinstance(name, str) or name not in self.offered:
            return ToolAnswer(f"no worker tool {name!r}", error=True)
        try:
            parsed = validate(WORKER_TOOLS[name].schema, arguments or {})
        except InvalidArgument as exc:
            return ToolAnswer(str(exc), error=True)
        extra = ""
        try:
            if name == "create_commit":
                report_id, sha = create_commit(self.conn, self.execution_id, self.token, parsed)
                extra = f"; commit {sha}"
            else:
                report_id = record(self.conn, self.execution_id, self.token, name, parsed)
        except ReportRefused as exc:
            return ToolAnswer(f"refused: {exc}", error=True)
        except DomainError as exc:
            return ToolAnswer(f"{name} failed: {exc.message}", error=True)
        return ToolAnswer(f"recorded ({name} #{report_id}{extra})")


def serve_connection(
    home: Path,
    execution_id: str,
    token: str,
    offered: list[str],
    stdin: IO[bytes],
    stdout: IO[bytes],
) -> None:
    """Serve one client (a relay's connection to the supervisor's gate, or stdio) until it
    closes, through a database connection of its own (opened at its first call)."""
    tools = WorkerTools(home, execution_id, token, offered)
    try:
        serve_stdio(tools, stdin, stdout)
    finally:
        tools.close()


def serve() -> None:
    """`python -m agent_run.worker_tools`: the same server over stdio, bound by its environment
    (how the protocol tests drive it with the mcp SDK's client and with hostile input)."""
    serve_connection(
        Path(os.environ[HOME_ENV]),
        os.environ[EXECUTION_ENV],
        os.environ[TOKEN_ENV],
        os.environ.get(TOOLS_ENV, "finish").split(","),
        sys.stdin.buffer,
        sys.stdout.buffer,
    )
