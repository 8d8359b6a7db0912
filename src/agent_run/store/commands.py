"""The command queue: the daemon enqueues cancel / steer; the execution's supervisor resolves them."""

import json
import sqlite3
import time
from typing import Any

from agent_run.store.db import inserted_id, one
from agent_run.store.events import append_event


def enqueue(
    conn: sqlite3.Connection,
    *,
    agent_id: str,
    execution_id: str,
    kind: str,
    payload: dict[str, Any],
) -> int:
    """Insert a pending command and log it. Call inside a write transaction."""
    cur = conn.execute(
        "INSERT INTO commands (agent_id, execution_id, kind, payload, state, created_at)"
        " VALUES (?, ?, ?, ?, 'pending', ?)",
        (agent_id, execution_id, kind, json.dumps(payload), time.time()),
    )
    append_event(
        conn,
        agent_id=agent_id,
        execution_id=execution_id,
        kind="command",
        data={"id": cur.lastrowid, "kind": kind, "state": "pending"},
    )
    return inserted_id(cur)


def pending(conn: sqlite3.Connection, execution_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM commands WHERE execution_id = ? AND state = 'pending' ORDER BY id",
        (execution_id,),
    ).fetchall()


def resolve(conn: sqlite3.Connection, command: sqlite3.Row, *, state: str, result: str) -> None:
    """Mark a command delivered / refused / done with a reason. Call inside a write transaction."""
    conn.execute(
        "UPDATE commands SET state = ?, result = ?, handled_at = ? WHERE id = ?",
        (state, result, time.time(), command["id"]),
    )
    append_event(
        conn,
        agent_id=command["agent_id"],
        execution_id=command["execution_id"],
        kind="command",
        data={"id": command["id"], "kind": command["kind"], "state": state, "result": result},
    )


def get(conn: sqlite3.Connection, command_id: int) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM commands WHERE id = ?", (command_id,))


def pending_kind(conn: sqlite3.Connection, execution_id: str, kind: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM commands WHERE execution_id = ? AND kind = ? AND state = 'pending' LIMIT 1",
            (execution_id, kind),
        ).fetchone()
        is not None
    )
