"""Worker-tool reports (`tool_reports`) and provider signals (`provider_signals`): append-only,
except that a report recorded as an intent (create_commit) is completed with its outcome."""

import json
import sqlite3
import time
from typing import Any

from agent_run.store.db import inserted_id
from agent_run.store.events import append_event


def append_report(
    conn: sqlite3.Connection,
    *,
    agent_id: str,
    execution_id: str,
    tool: str,
    payload: dict[str, Any],
) -> int:
    """Record one worker-tool call and log it. Call inside a write transaction."""
    cur = conn.execute(
        "INSERT INTO tool_reports (agent_id, execution_id, tool, payload, ts) VALUES (?, ?, ?, ?, ?)",
        (agent_id, execution_id, tool, json.dumps(payload), time.time()),
    )
    append_event(
        conn,
        agent_id=agent_id,
        execution_id=execution_id,
        kind="tool_report",
        data={"id": cur.lastrowid, "tool": tool},
    )
    return inserted_id(cur)


def complete_report(conn: sqlite3.Connection, report_id: int, payload: dict[str, Any]) -> None:
    """Replace an intent report's payload with its outcome. Call inside a write transaction."""
    conn.execute(
        "UPDATE tool_reports SET payload = ? WHERE id = ?", (json.dumps(payload), report_id)
    )


def reports(
    conn: sqlite3.Connection, execution_id: str, tool: str | None = None
) -> list[sqlite3.Row]:
    if tool is None:
        return conn.execute(
            "SELECT * FROM tool_reports WHERE execution_id = ? ORDER BY id", (execution_id,)
        ).fetchall()
    return conn.execute(
        "SELECT * FROM tool_reports WHERE execution_id = ? AND tool = ? ORDER BY id",
        (execution_id, tool),
    ).fetchall()


def append_signal(
    conn: sqlite3.Connection,
    *,
    agent_id: str,
    execution_id: str,
    runtime: str,
    kind: str,
    status: int | None,
    retry_after: float | None,
    detail: str,
) -> None:
    conn.execute(
        "INSERT INTO provider_signals (agent_id, execution_id, runtime, kind, status, retry_after,"
        " detail, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (agent_id, execution_id, runtime, kind, status, retry_after, detail[:1000], time.time()),
    )
