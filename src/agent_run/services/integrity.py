"""Answer integrity: re-hash a sealed answer, record what a check found (the stored flag and an
`integrity_failed` event), and the daemon's scrub that re-checks every sealed answer, spread out.

A sealed answer is found through the home it lives in (`agents/<agent>/<execution>/answer.md`),
never through the absolute path stored when it was sealed: a home moved, restored from a backup
or copied to another machine still serves its answers."""

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from agent_run.domain.errors import AnswerIntegrity, StorageFull
from agent_run.store.db import write
from agent_run.store.events import append_event
from agent_run.supervisor.seal import read_verified_answer
from agent_run.system.home import Home

SCRUB_BATCH = 20  # answers re-hashed per scrub pass at most


def answer_verified(row: sqlite3.Row) -> bool | None:
    """None without a sealed answer; False once a re-hash found it not matching its proof."""
    if row["answer_sha256"] is None:
        return None
    return row["integrity_failed_at"] is None


def sealed_answer_path(home: Home, row: sqlite3.Row) -> Path:
    """Where an execution's sealed answer is in this home (the supervisor seals it there)."""
    return home.execution_dir(row["agent_id"], row["id"]) / "answer.md"


def _check(home: Home, row: sqlite3.Row) -> tuple[str | None, AnswerIntegrity | None]:
    try:
        return read_verified_answer(
            sealed_answer_path(home, row), row["answer_sha256"], row["answer_bytes"]
        ), None
    except AnswerIntegrity as exc:
        return None, exc


def record_check(
    conn: sqlite3.Connection,
    home: Home,
    row: sqlite3.Row,
    failure: AnswerIntegrity | None,
    by: str,
) -> None:
    """Store a check's result; an event only when the verdict changes. In a write transaction."""
    now = time.time()
    current = conn.execute(
        "SELECT integrity_failed_at FROM executions WHERE id = ?", (row["id"],)
    ).fetchone()
    was_failed = current["integrity_failed_at"] is not None
    failed_at = (current["integrity_failed_at"] or now) if failure is not None else None
    conn.execute(
        "UPDATE executions SET answer_checked_at = ?, integrity_failed_at = ? WHERE id = ?",
        (now, failed_at, row["id"]),
    )
    if failure is not None and not was_failed:
        append_event(
            conn,
            agent_id=row["agent_id"],
            execution_id=row["id"],
            kind="integrity_failed",
            data={
                "by": by,
                "path": str(sealed_answer_path(home, row)),
                "message": failure.message[:500],
                "expected_sha256": row["answer_sha256"],
            },
        )
    elif failure is None and was_failed:
        append_event(
            conn,
            agent_id=row["agent_id"],
            execution_id=row["id"],
            kind="integrity_restored",
            data={"by": by, "path": str(sealed_answer_path(home, row))},
        )


def verified_answer(conn: sqlite3.Connection, home: Home, row: sqlite3.Row, by: str) -> str:
    """The sealed answer, re-hashed; a mismatch is recorded, then raised as AnswerIntegrity.
    A passing check writes nothing unless it clears an earlier failure (reads stay reads)."""
    text, failure = _check(home, row)
    if failure is not None or row["integrity_failed_at"] is not None:
        try:
            with write(conn, "the answer's integrity check"):
                record_check(conn, home, row, failure, by)
        except StorageFull:
            pass  # the check's verdict still stands; the scrub records it once space returns
    if failure is not None:
        raise failure
    assert text is not None
    return text


@dataclass(frozen=True)
class ScrubResult:
    checked: int
    failed: list[str]  # execution ids whose answer no longer matches


def scrub_once(
    conn: sqlite3.Connection, home: Home, period_seconds: float, limit: int = SCRUB_BATCH
) -> ScrubResult:
    """Re-hash the sealed answers not checked for `period_seconds`, oldest check first. Each
    answer's last check (its seal, at first) spreads the checks over the period."""
    due = conn.execute(
        "SELECT * FROM executions WHERE answer_sha256 IS NOT NULL"  # the executions_sealed index
        " AND (answer_checked_at IS NULL OR answer_checked_at <= ?) ORDER BY answer_checked_at LIMIT ?",
        (time.time() - period_seconds, limit),
    ).fetchall()
    results = [(row, _check(home, row)[1]) for row in due]  # hashing happens outside the write lock
    if results:
        with write(conn, "the answer scrub's results"):
            for row, failure in results:
                record_check(conn, home, row, failure, "scrub")
    return ScrubResult(len(results), [row["id"] for row, failure in results if failure is not None])
