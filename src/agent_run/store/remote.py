"""Queries on `remote_executions`: an execution placed on a host, the agent its host made for
it, and how far the host's record has been mirrored here (migration 0015)."""

import json
import sqlite3
import time
from typing import Any

from agent_run.store.agents import TERMINAL_SQL
from agent_run.store.db import one


def insert(
    conn: sqlite3.Connection, execution_id: str, host: str, workspace: dict[str, Any] | None
) -> None:
    """Place an admitted execution on `host`. Call inside the admission's write transaction."""
    now = time.time()
    conn.execute("UPDATE executions SET host = ? WHERE id = ?", (host, execution_id))
    conn.execute(
        "INSERT INTO remote_executions (execution_id, host, workspace_json, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (execution_id, host, json.dumps(workspace) if workspace else None, now, now),
    )


def get(conn: sqlite3.Connection, execution_id: str) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM remote_executions WHERE execution_id = ?", (execution_id,))


def live_hosts(conn: sqlite3.Connection) -> list[str]:
    """Hosts with an execution placed there that has not ended here."""
    rows = conn.execute(
        f"SELECT DISTINCT host FROM executions WHERE host IS NOT NULL AND state NOT IN {TERMINAL_SQL}"
    ).fetchall()
    return [row["host"] for row in rows]


def live_on_host(conn: sqlite3.Connection, host: str) -> list[sqlite3.Row]:
    """The host's executions live here, each with its mirror bookkeeping, oldest first."""
    return conn.execute(
        "SELECT e.*, r.remote_agent_id, r.remote_execution_id, r.event_seq, r.message_id,"
        " r.workspace_json FROM executions e JOIN remote_executions r ON r.execution_id = e.id"
        f" WHERE e.host = ? AND e.state NOT IN {TERMINAL_SQL} ORDER BY e.created_at",
        (host,),
    ).fetchall()


def set_remote_agent(
    conn: sqlite3.Connection, execution_id: str, agent_id: str, remote_execution_id: str
) -> None:
    conn.execute(
        "UPDATE remote_executions SET remote_agent_id = ?, remote_execution_id = ?, updated_at = ?"
        " WHERE execution_id = ?",
        (agent_id, remote_execution_id, time.time(), execution_id),
    )


def advance(conn: sqlite3.Connection, execution_id: str, event_seq: int, message_id: int) -> None:
    """Move the mirror's cursor: in the same transaction as what it copied."""
    conn.execute(
        "UPDATE remote_executions SET event_seq = ?, message_id = ?, updated_at = ?"
        " WHERE execution_id = ?",
        (event_seq, message_id, time.time(), execution_id),
    )
