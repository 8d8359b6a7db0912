"""The model roster cache (`model_rosters`): each runtime's own model list, as last collected."""

import json
import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class Roster:
    """The models an engine itself listed for a runtime, and when."""

    runtime: str
    models: list[str]
    observed_at: float
    source: str


def put_rosters(conn: sqlite3.Connection, rosters: list[Roster]) -> None:
    """Replace each runtime's cached roster. Call inside a write transaction."""
    conn.executemany(
        "INSERT INTO model_rosters (runtime, models_json, observed_at, source) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (runtime) DO UPDATE SET models_json = excluded.models_json,"
        " observed_at = excluded.observed_at, source = excluded.source",
        [(r.runtime, json.dumps(r.models), r.observed_at, r.source) for r in rosters],
    )


def rosters(conn: sqlite3.Connection) -> dict[str, Roster]:
    rows = conn.execute(
        "SELECT runtime, models_json, observed_at, source FROM model_rosters"
    ).fetchall()
    return {row[0]: Roster(row[0], list(json.loads(row[1])), float(row[2]), row[3]) for row in rows}
