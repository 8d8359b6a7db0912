"""The append-only event log (global `seq` = revision; contiguous `agent_seq` per agent) and messages."""

import json
import sqlite3
import time
from typing import Any

from agent_run.store.db import inserted_id, one, scalar


def append_event(
    conn: sqlite3.Connection,
    *,
    agent_id: str,
    execution_id: str,
    kind: str,
    data: dict[str, Any],
    ts: float | None = None,
) -> int:
    """Append one event; call inside a write transaction so `agent_seq` stays contiguous."""
    cur = conn.execute(
        "INSERT INTO events (agent_id, execution_id, agent_seq, kind, data, ts)"
        " SELECT ?, ?, coalesce(max(agent_seq), 0) + 1, ?, ?, ? FROM events WHERE agent_id = ?",
        (
            agent_id,
            execution_id,
            kind,
            json.dumps(data, separators=(",", ":")),
            ts if ts is not None else time.time(),
            agent_id,
        ),
    )
    return inserted_id(cur)


def append_message(
    conn: sqlite3.Connection,
    *,
    agent_id: str,
    execution_id: str,
    role: str,
    name: str | None,
    content: str,
    ts: float | None = None,
    is_error: bool = False,
) -> int:
    cur = conn.execute(
        "INSERT INTO messages (agent_id, execution_id, role, name, content, ts, is_error)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            agent_id,
            execution_id,
            role,
            name,
            content,
            ts if ts is not None else time.time(),
            int(is_error),
        ),
    )
    return inserted_id(cur)


def current_revision(conn: sqlite3.Connection) -> int:
    """The highest event seq ever given (AUTOINCREMENT's counter), so it never goes back when
    retention deletes the newest events (`store/retention.py`)."""
    return scalar(
        conn, "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)"
    )


def count_events(conn: sqlite3.Connection, agent_id: str) -> int:
    return scalar(conn, "SELECT count(*) FROM events WHERE agent_id = ?", (agent_id,))


def agent_events(
    conn: sqlite3.Connection,
    agent_id: str,
    *,
    after_seq: int = 0,
    limit: int = 1000,
    kinds: list[str] | None = None,
) -> list[sqlite3.Row]:
    if kinds is None:
        return conn.execute(
            "SELECT * FROM events WHERE agent_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (agent_id, after_seq, limit),
        ).fetchall()
    marks = ",".join("?" * len(kinds))
    return conn.execute(
        f"SELECT * FROM events WHERE agent_id = ? AND seq > ? AND kind IN ({marks}) ORDER BY seq LIMIT ?",
        (agent_id, after_seq, *kinds, limit),
    ).fetchall()


def messages_page(
    conn: sqlite3.Connection, agent_id: str, *, after_id: int, limit: int
) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT m.*, e.number AS execution_number FROM messages m"
        " JOIN executions e ON e.id = m.execution_id"
        " WHERE m.agent_id = ? AND m.id > ? ORDER BY m.id LIMIT ?",
        (agent_id, after_id, limit),
    ).fetchall()


def turn_at(conn: sqlite3.Connection, agent_id: str, message_id: int) -> int:
    """The execution number of the agent's last message at or before `message_id` (0: none)."""
    return scalar(
        conn,
        "SELECT coalesce((SELECT e.number FROM messages m JOIN executions e ON e.id = m.execution_id"
        " WHERE m.agent_id = ? AND m.id <= ? ORDER BY m.id DESC LIMIT 1), 0)",
        (agent_id, message_id),
    )


def turn_prompts(
    conn: sqlite3.Connection, agent_id: str, after: int, upto: int | None
) -> list[sqlite3.Row]:
    """The agent's executions numbered in (after, upto] (no upper bound: None), with their prompts."""
    return conn.execute(
        "SELECT number, kind, prompt, created_at FROM executions"
        " WHERE agent_id = ? AND number > ? AND number <= ? ORDER BY number",
        (agent_id, after, upto if upto is not None else 2**62),
    ).fetchall()


def last_message(conn: sqlite3.Connection, agent_id: str) -> sqlite3.Row | None:
    return one(
        conn, "SELECT * FROM messages WHERE agent_id = ? ORDER BY id DESC LIMIT 1", (agent_id,)
    )


def revision_and_state_changes(
    conn: sqlite3.Connection, after: int, limit: int
) -> tuple[int, list[str] | None]:
    """The current revision and the distinct agents with a `state` event in (after, it], from
    one snapshot; None instead of the ids when there are more than `limit`."""
    conn.execute("BEGIN")
    try:
        revision = current_revision(conn)
        rows = conn.execute(
            "SELECT DISTINCT agent_id FROM events WHERE seq > ? AND seq <= ? AND kind = 'state'"
            " LIMIT ?",
            (after, revision, limit + 1),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    return revision, ([r[0] for r in rows] if len(rows) <= limit else None)


def changed_since(conn: sqlite3.Connection, revision: int, upto: int, limit: int) -> list[str]:
    """The distinct agent and batch ids (events of batches carry the batch id) in (revision, upto]."""
    rows = conn.execute(
        "SELECT agent_id FROM events WHERE seq > ? AND seq <= ? GROUP BY agent_id"
        " ORDER BY max(seq) LIMIT ?",
        (revision, upto, limit + 1),
    ).fetchall()
    return [r[0] for r in rows]
