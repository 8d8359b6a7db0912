"""Queries of the notice outbox: notify targets, notices moved by compare-and-set on their
state, and the one dispatcher's lease."""

import json
import sqlite3
import time
from typing import Any

from agent_run.domain.batch_states import BATCH_SETTLED
from agent_run.domain.states import TERMINAL_STATES
from agent_run.store.db import one
from agent_run.store.events import append_event

# The domain's terminal sets, as bind parameters of the queries below.
TERMINAL_EXECUTIONS = tuple(sorted(state.value for state in TERMINAL_STATES))
# A batch is announced when it ends or waits on the user, once per settle.
SETTLED_BATCHES = tuple(sorted(state.value for state in BATCH_SETTLED))
DUE_STATES = ("pending", "retry_wait")


def _announce(conn: sqlite3.Connection, notice_ids: list[str]) -> None:
    """Append a `notice` event to the agent's (or batch's) log for each notice whose state just
    moved: its revision is how `changes` (and so a page, live) learns of a delivery."""
    for notice_id in notice_ids:
        row = notice_with_target(conn, notice_id)
        if row is None:
            continue
        owner = row["target_agent"] or row["target_batch"]
        append_event(
            conn,
            agent_id=owner,
            execution_id=row["subject"] if row["target_agent"] else owner,
            kind="notice",
            data={"notice": notice_id, "state": row["state"], "attempts": row["attempts"]},
        )


def insert_target(
    conn: sqlite3.Connection,
    target_json: str,
    *,
    agent_id: str | None = None,
    batch_id: str | None = None,
) -> None:
    conn.execute(
        "INSERT INTO notify_targets (agent_id, batch_id, target_json, created_at)"
        " VALUES (?, ?, ?, ?)",
        (agent_id, batch_id, target_json, time.time()),
    )


_ENDED_EXECUTIONS_SQL = f"""
SELECT t.id AS target_id, t.target_json, e.id AS subject, e.agent_id, e.number AS execution,
       e.state, e.failure_kind, e.answer_sha256, a.runtime, a.model
FROM notify_targets t
JOIN executions e ON e.agent_id = t.agent_id
JOIN agents a ON a.id = e.agent_id
WHERE e.state IN ({",".join("?" * len(TERMINAL_EXECUTIONS))})
  AND NOT EXISTS (SELECT 1 FROM notices n WHERE n.subject = e.id)
LIMIT 200
"""

_SETTLED_BATCHES_SQL = f"""
SELECT t.id AS target_id, t.target_json, b.id || ':' || b.settles AS subject, b.id AS batch_id,
       b.state, b.workflow, b.settles AS settle
FROM notify_targets t
JOIN batches b ON b.id = t.batch_id
WHERE b.state IN ({",".join("?" * len(SETTLED_BATCHES))})
  AND NOT EXISTS (SELECT 1 FROM notices n WHERE n.subject = b.id || ':' || b.settles)
LIMIT 200
"""


def ended_without_notice(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every ended execution (of an agent with a target) with no notice yet, and every batch
    with a target whose latest settle (blocked or ended) has none."""
    rows = conn.execute(_ENDED_EXECUTIONS_SQL, TERMINAL_EXECUTIONS).fetchall()
    rows += conn.execute(_SETTLED_BATCHES_SQL, SETTLED_BATCHES).fetchall()
    return [dict(row) for row in rows]


def insert_notice(
    conn: sqlite3.Connection,
    *,
    notice_id: str,
    target_id: int,
    subject: str,
    transport: str,
    body_json: str,
) -> bool:
    """The notice for `subject`, pending; False when one exists already (another pass made it)."""
    now = time.time()
    cursor = conn.execute(
        "INSERT OR IGNORE INTO notices (id, target_id, subject, transport, body_json, state,"
        " next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
        (notice_id, target_id, subject, transport, body_json, now, now, now),
    )
    if cursor.rowcount != 1:
        return False
    _announce(conn, [notice_id])
    return True


def claim_due(conn: sqlite3.Connection, now: float, limit: int = 16) -> list[dict[str, Any]]:
    """Move due notices to `sending` (one attempt more) and return them with their targets."""
    rows = conn.execute(
        "SELECT n.id FROM notices n WHERE n.state IN ('pending', 'retry_wait')"
        " AND n.transport != 'mcp_channel'"
        " AND n.next_attempt_at <= ? ORDER BY n.next_attempt_at LIMIT ?",
        (now, limit),
    ).fetchall()
    claimed = []
    for row in rows:
        cursor = conn.execute(
            "UPDATE notices SET state = 'sending', attempts = attempts + 1, updated_at = ?"
            " WHERE id = ? AND state IN ('pending', 'retry_wait')",
            (now, row["id"]),
        )
        if cursor.rowcount == 1:
            _announce(conn, [row["id"]])
            claimed.append(
                dict(
                    conn.execute(
                        "SELECT n.*, t.target_json FROM notices n"
                        " JOIN notify_targets t ON t.id = n.target_id WHERE n.id = ?",
                        (row["id"],),
                    ).fetchone()
                )
            )
    return claimed


def finish_attempt(
    conn: sqlite3.Connection,
    notice_id: str,
    *,
    state: str,
    next_attempt_at: float,
    last_error: str | None,
    evidence_json: str,
) -> bool:
    """Record an attempt's outcome; only a notice still `sending` moves (compare-and-set)."""
    cursor = conn.execute(
        "UPDATE notices SET state = ?, next_attempt_at = ?, last_error = ?, evidence_json = ?,"
        " updated_at = ? WHERE id = ? AND state = 'sending'",
        (state, next_attempt_at, last_error, evidence_json, time.time(), notice_id),
    )
    if cursor.rowcount != 1:
        return False
    _announce(conn, [notice_id])
    return True


def requeue_ambiguous(conn: sqlite3.Connection, now: float, evidence_json: str) -> int:
    """Notices a dead dispatcher left `sending`: it may have sent them, so retry (a repeat is
    possible and harmless: each notice carries its id)."""
    cursor = conn.execute(
        "UPDATE notices SET state = 'retry_wait', ambiguous_sends = ambiguous_sends + 1,"
        " next_attempt_at = ?, last_error = 'the dispatcher stopped during the send (ambiguous)',"
        " evidence_json = ?, updated_at = ? WHERE state = 'sending' RETURNING id",
        (now, evidence_json, now),
    )
    return _announced(conn, cursor)


def _announced(conn: sqlite3.Connection, cursor: sqlite3.Cursor) -> int:
    """Announce the notices an `UPDATE ... RETURNING id` moved; how many."""
    moved = [row[0] for row in cursor.fetchall()]
    _announce(conn, moved)
    return len(moved)


def take_lease(
    conn: sqlite3.Connection, holder: str, pid: int, now: float, ttl: float, *, holder_dead: bool
) -> tuple[bool, str | None]:
    """(held, previous holder taken over). Taken when free, ours, expired or its holder dead.
    Ours with more than half of `ttl` left, it is held as it is: renewed only past half-time, so
    an idle daemon writes the row every ttl/2, not at each pass (each write a WAL frame)."""
    row = one(conn, "SELECT * FROM notice_lease WHERE id = 1")
    if row is None:
        conn.execute(
            "INSERT INTO notice_lease (id, holder, holder_pid, expires_at) VALUES (1, ?, ?, ?)",
            (holder, pid, now + ttl),
        )
        return True, None
    if row["holder"] != holder and row["expires_at"] > now and not holder_dead:
        return False, None
    if row["holder"] == holder and row["expires_at"] - now > ttl / 2:
        return True, None
    conn.execute(
        "UPDATE notice_lease SET holder = ?, holder_pid = ?, expires_at = ? WHERE id = 1",
        (holder, pid, now + ttl),
    )
    return True, (row["holder"] if row["holder"] != holder else None)


def lease_holder(conn: sqlite3.Connection) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM notice_lease WHERE id = 1")


def notices_of(conn: sqlite3.Connection, target_id: int) -> list[dict[str, Any]]:
    """A target's notices, oldest first (an agent's: one per execution that ended; a batch's:
    one per settle)."""
    rows = conn.execute(
        "SELECT * FROM notices WHERE target_id = ? ORDER BY created_at, id", (target_id,)
    ).fetchall()
    return [dict(row) for row in rows]


def target_of(
    conn: sqlite3.Connection, *, agent_id: str | None = None, batch_id: str | None = None
) -> sqlite3.Row | None:
    """The notify target of an agent or a batch (None: started without notify)."""
    if agent_id is not None:
        return one(conn, "SELECT * FROM notify_targets WHERE agent_id = ?", (agent_id,))
    return one(conn, "SELECT * FROM notify_targets WHERE batch_id = ?", (batch_id,))


def notice_with_target(conn: sqlite3.Connection, notice_id: str) -> sqlite3.Row | None:
    """A notice and the agent or batch its target names."""
    return one(
        conn,
        "SELECT n.*, t.agent_id AS target_agent, t.batch_id AS target_batch,"
        " t.target_json FROM notices n JOIN notify_targets t ON t.id = n.target_id"
        " WHERE n.id = ?",
        (notice_id,),
    )


_SESSION_NOTICES = """
SELECT n.id FROM notices n JOIN notify_targets t ON t.id = n.target_id
WHERE n.transport = 'mcp_channel' AND json_extract(t.target_json, '$.session') = ?
  AND n.state IN ('pending', 'retry_wait')
"""


def claim_for_session(conn: sqlite3.Connection, session: str, now: float) -> list[dict[str, Any]]:
    """An MCP session's owed notices, moved to `sending` (acked by its next poll)."""
    claimed = []
    for row in conn.execute(_SESSION_NOTICES, (session,)).fetchall():
        cursor = conn.execute(
            "UPDATE notices SET state = 'sending', attempts = attempts + 1, updated_at = ?"
            " WHERE id = ? AND state IN ('pending', 'retry_wait')",
            (now, row["id"]),
        )
        if cursor.rowcount == 1:
            _announce(conn, [row["id"]])
            claimed.append(
                dict(conn.execute("SELECT * FROM notices WHERE id = ?", (row["id"],)).fetchone())
            )
    return claimed


def expire_session(conn: sqlite3.Connection, session: str, reason: str) -> int:
    """End an MCP session's undelivered notices `expired` (the session is gone)."""
    cursor = conn.execute(
        "UPDATE notices SET state = 'expired', last_error = ?, updated_at = ?"
        " WHERE transport = 'mcp_channel' AND state IN ('pending', 'retry_wait', 'sending')"
        " AND target_id IN (SELECT id FROM notify_targets"
        " WHERE json_extract(target_json, '$.session') = ?) RETURNING id",
        (reason, time.time(), session),
    )
    return _announced(conn, cursor)


def channel_sessions_owed(conn: sqlite3.Connection) -> list[str]:
    """The MCP sessions that have notices not yet delivered."""
    rows = conn.execute(
        "SELECT DISTINCT json_extract(t.target_json, '$.session') AS session FROM notices n"
        " JOIN notify_targets t ON t.id = n.target_id WHERE n.transport = 'mcp_channel'"
        " AND n.state IN ('pending', 'retry_wait', 'sending')"
    ).fetchall()
    return [row["session"] for row in rows if row["session"]]


_TARGET_MAX_ATTEMPTS = (
    "COALESCE((SELECT json_extract(t.target_json, '$.max_attempts') FROM notify_targets t"
    " WHERE t.id = notices.target_id), ?)"
)


def requeue_unacked(
    conn: sqlite3.Connection, transport: str, before: float, now: float, default_max: int
) -> int:
    """Notices handed to a receiver that never acknowledged them: ambiguous, so retried, until
    the target's `max_attempts` pushes were made (then `failed`)."""
    cursor = conn.execute(
        f"UPDATE notices SET state = CASE WHEN attempts >= {_TARGET_MAX_ATTEMPTS}"
        " THEN 'failed' ELSE 'retry_wait' END, ambiguous_sends = ambiguous_sends + 1,"
        " next_attempt_at = ?, last_error = CASE WHEN attempts >= "
        f"{_TARGET_MAX_ATTEMPTS} THEN 'pushed ' || attempts || ' time(s), never acknowledged'"
        " ELSE 'pushed but never acknowledged (ambiguous)' END,"
        " updated_at = ? WHERE transport = ? AND state = 'sending' AND updated_at < ? RETURNING id",
        (default_max, now, default_max, now, transport, before),
    )
    return _announced(conn, cursor)


def requeue_stale_sending(
    conn: sqlite3.Connection, in_flight: list[str], now: float, evidence_json: str
) -> int:
    """Dispatched notices left `sending` that this dispatcher is not sending (its attempt's
    outcome could not be recorded): ambiguous, so retried."""
    cursor = conn.execute(
        "UPDATE notices SET state = 'retry_wait', ambiguous_sends = ambiguous_sends + 1,"
        " next_attempt_at = ?, last_error = 'the attempt ended without its outcome recorded"
        " (ambiguous)', evidence_json = ?, updated_at = ? WHERE state = 'sending'"
        " AND transport != 'mcp_channel' AND id NOT IN (SELECT value FROM json_each(?))"
        " RETURNING id",
        (now, evidence_json, now, json.dumps(in_flight)),
    )
    return _announced(conn, cursor)


def acknowledge(conn: sqlite3.Connection, notice_ids: list[str], evidence_json: str) -> int:
    """Mark pushed notices delivered (compare-and-set on `sending`)."""
    done = []
    for notice_id in notice_ids:
        if conn.execute(
            "UPDATE notices SET state = 'delivered', last_error = NULL, evidence_json = ?,"
            " updated_at = ? WHERE id = ? AND state = 'sending' AND transport = 'mcp_channel'",
            (evidence_json, time.time(), notice_id),
        ).rowcount:
            done.append(notice_id)
    _announce(conn, done)
    return len(done)
