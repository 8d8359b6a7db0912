"""The worker MCP server process: `python -m agent_run.worker_tools` (stdio), one per engine.

Configuration arrives in its environment: the home, the execution id and the capability
token. A call is recorded only while the token's hash matches the execution's and the
execution is live; it writes the database directly, so it works while the daemon is down.
"""

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from agent_run.domain.errors import DomainError
from agent_run.domain.states import ExecutionState
from agent_run.store.agents import get_execution
from agent_run.store.db import connect, write
from agent_run.store.reports import append_report, complete_report
from agent_run.worker_tools.binding import (
    EXECUTION_ENV, HOME_ENV, SERVER_NAME, TOKEN_ENV, TOOLS_ENV, token_hash,
)
from agent_run.worker_tools.catalog import WORKER_TOOLS


class ReportRefused(Exception):
    pass


def _bound_row(conn: sqlite3.Connection, execution_id: str, token: str) -> sqlite3.Row:
    row = get_execution(conn, execution_id)
    if row is None or row["worker_token_sha256"] != token_hash(token):
        raise ReportRefused("this worker-tools server is not bound to a known execution")
    if ExecutionState(row["state"]).terminal:
        raise ReportRefused(f"the execution already ended ({row['state']})")
    return row


def record(conn: sqlite3.Connection, execution_id: str, token: str, tool: str,
           payload: dict[str, Any]) -> int:
    with write(conn):
        row = _bound_row(conn, execution_id, token)
        return append_report(conn, agent_id=row["agent_id"], execution_id=execution_id, tool=tool,
                             payload=payload)


def workdir_of(conn: sqlite3.Connection, execution_id: str) -> Path:
    row = get_execution(conn, execution_id)
    return Path(json.loads(row["plan_json"])["workdir"])


def create_commit(conn: sqlite3.Connection, execution_id: str, token: str, payload: dict[str, Any]) -> tuple[int, str]:
    """Record the intent first (while the execution is live), then commit, then complete the
    report with the sha: a commit never exists without its report, whatever ends in between
    (the judge then finds the commit in git). A failed commit completes it as `failed`."""
    from agent_run.batches.git import commit_files

    report_id = record(conn, execution_id, token, "create_commit", {**payload, "sha": None, "state": "intent"})
    try:
        sha = commit_files(workdir_of(conn, execution_id), payload["message"], payload["files"])
    except DomainError as exc:
        _complete(conn, report_id, {**payload, "sha": None, "state": "failed", "error": exc.message})
        raise
    _complete(conn, report_id, {**payload, "sha": sha, "state": "committed"})
    return report_id, sha


def _complete(conn: sqlite3.Connection, report_id: int, payload: dict[str, Any]) -> None:
    with write(conn):
        complete_report(conn, report_id, payload)


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


def build_server(conn: sqlite3.Connection, execution_id: str, token: str,
                 offered: list[str]) -> Server[Any]:
    tools = [types.Tool(name=t.name, description=t.description,
                        input_schema=t.params.model_json_schema(),
                        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                          idempotent_hint=False, open_world_hint=False))
             for name, t in WORKER_TOOLS.items() if name in offered]

    async def list_tools(_ctx: ServerRequestContext[Any, Any], _p: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = WORKER_TOOLS.get(params.name)
        if tool is None or params.name not in offered:
            return _text(f"no worker tool {params.name!r}", error=True)
        try:
            parsed = tool.params.model_validate(params.arguments or {})
        except ValidationError as exc:
            first = exc.errors()[0]
            return _text(f"invalid {'.'.join(map(str, first['loc']))}: {first['msg']}", error=True)
        extra = ""
        try:
            if tool.name == "create_commit":
                report_id, sha = create_commit(conn, execution_id, token, parsed.model_dump())
                extra = f"; commit {sha}"
            else:
                report_id = record(conn, execution_id, token, tool.name, parsed.model_dump())
        except ReportRefused as exc:
            return _text(f"refused: {exc}", error=True)
        except DomainError as exc:
            return _text(f"{tool.name} failed: {exc.message}", error=True)
        return _text(f"recorded ({tool.name} #{report_id}{extra})")

    return Server(SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve() -> None:
    home = Path(os.environ[HOME_ENV])
    conn = connect(home / "state.db", apply_migrations=False)
    offered = os.environ.get(TOOLS_ENV, "finish").split(",")
    server = build_server(conn, os.environ[EXECUTION_ENV], os.environ[TOKEN_ENV], offered)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
