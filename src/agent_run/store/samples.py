"""Capacity samples (`capacity_samples`): append a reading, read them back, trim to the retention."""

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One reading of one quota window, as stored."""

    runtime: str
    account: str | None
    lane: str
    window: str
    remaining_percent: float | None
    reset_at: float | None
    observed_at: float
    valid_until: float
    source: str
    execution_id: str | None = None
    reset_credits: int | None = None  # resets the account can still redeem, when it said


_COLUMNS = (
    "runtime, account, lane, window, remaining_percent, reset_at, observed_at, valid_until,"
    " source, execution_id, reset_credits"
)


def append_samples(conn: sqlite3.Connection, samples: list[Sample], retention: int | None) -> int:
    """Insert `samples`; with a retention, keep only the newest `retention` rows (a supervisor
    passes None: the daemon trims). Call inside a write transaction."""
    conn.executemany(
        f"INSERT INTO capacity_samples ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                s.runtime,
                s.account,
                s.lane,
                s.window,
                s.remaining_percent,
                s.reset_at,
                s.observed_at,
                s.valid_until,
                s.source,
                s.execution_id,
                s.reset_credits,
            )
            for s in samples
        ],
    )
    if retention is not None:
        trim(conn, retention)
    return len(samples)


def trim(conn: sqlite3.Connection, retention: int) -> None:
    """Keep the newest `retention` samples. Call inside a write transaction."""
    conn.execute(
        "DELETE FROM capacity_samples WHERE id NOT IN "
        "(SELECT id FROM capacity_samples ORDER BY observed_at DESC, id DESC LIMIT ?)",
        (retention,),
    )


def samples_since(conn: sqlite3.Connection, since: float) -> list[Sample]:
    """Every sample observed at or after `since`, oldest first."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM capacity_samples WHERE observed_at >= ? ORDER BY observed_at, id",
        (since,),
    ).fetchall()
    return [Sample(*tuple(row)) for row in rows]


def sample_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM capacity_samples").fetchone()[0])
