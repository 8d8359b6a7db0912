"""Queries on `batches`, `batch_runs` and `batch_attempts`. The daemon is their only writer."""

import json
import sqlite3
import time
from typing import Any

from agent_run.store.events import append_event

TERMINAL_BATCH_SQL = "('completed', 'failed', 'cancelled')"


def log_batch(conn: sqlite3.Connection, batch_id: str, data: dict[str, Any]) -> None:
    """A `batch` event: it moves the global revision, which long-polls and `--follow` watch."""
    append_event(conn, agent_id=batch_id, execution_id=batch_id, kind="batch", data=data)


def insert_batch(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    now = time.time()
    conn.execute(
        "INSERT INTO batches (id, request_id, request_hash, workflow, config_json, project_root,"
        " project_subdir, base_ref, base_sha, worktree_root, state, created_at, updated_at)"
        " VALUES (:id, :request_id, :request_hash, :workflow, :config_json, :project_root,"
        " :project_subdir, :base_ref, :base_sha, :worktree_root, 'queued', :now, :now)",
        {**row, "now": now},
    )
    log_batch(conn, row["id"], {"state": "queued"})


def insert_run(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    now = time.time()
    row = {"parent_run_id": None, "worktree": None, "branch": None, "result_json": None, **row}
    conn.execute(
        "INSERT INTO batch_runs (id, batch_id, stage, idx, parent_run_id, title, prompt, profile,"
        " worktree, branch, workdir, state, result_json, created_at, updated_at) VALUES (:id, :batch_id,"
        " :stage, :idx, :parent_run_id, :title, :prompt, :profile, :worktree, :branch, :workdir,"
        " 'queued', :result_json, :now, :now)",
        {**row, "now": now},
    )
    log_batch(conn, row["batch_id"], {"run": row["id"], "state": "queued"})


def get_batch(conn: sqlite3.Connection, batch_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM batches WHERE id = ?", (batch_id,)).fetchone()


def get_batch_by_request(conn: sqlite3.Connection, request_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM batches WHERE request_id = ?", (request_id,)).fetchone()


def live_batches(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(f"SELECT * FROM batches WHERE state NOT IN {TERMINAL_BATCH_SQL}"
                        " ORDER BY created_at").fetchall()


def list_batches(conn: sqlite3.Connection, *, limit: int, offset: int) -> tuple[list[sqlite3.Row], int]:
    total = conn.execute("SELECT count(*) FROM batches").fetchone()[0]
    rows = conn.execute("SELECT * FROM batches ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
                        (limit, offset)).fetchall()
    return rows, total


def runs(conn: sqlite3.Connection, batch_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM batch_runs WHERE batch_id = ? ORDER BY CASE stage WHEN 'generator' THEN 0"
        " WHEN 'worker' THEN 1 WHEN 'candidate' THEN 1 WHEN 'reviewer' THEN 2 ELSE 3 END, idx",
        (batch_id,)).fetchall()


def get_run(conn: sqlite3.Connection, run_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM batch_runs WHERE id = ?", (run_id,)).fetchone()


def attempts(conn: sqlite3.Connection, run_id: str) -> list[sqlite3.Row]:
    return conn.execute("SELECT * FROM batch_attempts WHERE run_id = ? ORDER BY attempt",
                        (run_id,)).fetchall()


def update_batch(conn: sqlite3.Connection, batch_id: str, **fields: Any) -> None:
    fields = {**fields, "updated_at": time.time()}
    assignments = ", ".join(f"{name} = :{name}" for name in fields)
    conn.execute(f"UPDATE batches SET {assignments} WHERE id = :id", {**fields, "id": batch_id})
    if "state" in fields or "cancel_requested" in fields:
        log_batch(conn, batch_id, {k: v for k, v in fields.items() if k != "updated_at"})


def update_run(conn: sqlite3.Connection, run: sqlite3.Row, **fields: Any) -> None:
    fields = {**fields, "updated_at": time.time()}
    assignments = ", ".join(f"{name} = :{name}" for name in fields)
    conn.execute(f"UPDATE batch_runs SET {assignments} WHERE id = :id", {**fields, "id": run["id"]})
    log_batch(conn, run["batch_id"], {"run": run["id"], **{k: v for k, v in fields.items()
                                                           if k in ("state", "score", "rank", "attempt")}})


def update_run_if(conn: sqlite3.Connection, run: sqlite3.Row, *, expect_state: str | tuple[str, ...],
                  expect_attempt: int, **fields: Any) -> bool:
    """Compare-and-set: update the run only while it is still in `state` (one or several) at
    `attempt`; False when someone moved it meanwhile (a stop, a rerun, a cancel)."""
    states = (expect_state,) if isinstance(expect_state, str) else expect_state
    fields = {**fields, "updated_at": time.time()}
    assignments = ", ".join(f"{name} = :{name}" for name in fields)
    marks = ", ".join(f":s{i}" for i in range(len(states)))
    cursor = conn.execute(
        f"UPDATE batch_runs SET {assignments} WHERE id = :id AND attempt = :expect_attempt AND state IN ({marks})",
        {**fields, "id": run["id"], "expect_attempt": expect_attempt, **{f"s{i}": s for i, s in enumerate(states)}})
    if cursor.rowcount != 1:
        return False
    log_batch(conn, run["batch_id"], {"run": run["id"], **{k: v for k, v in fields.items()
                                                           if k in ("state", "score", "rank", "attempt")}})
    return True


def record_attempt(conn: sqlite3.Connection, run: sqlite3.Row, *, attempt: int, kind: str,
                   agent_id: str) -> None:
    conn.execute("INSERT OR IGNORE INTO batch_attempts (run_id, attempt, kind, agent_id, created_at)"
                 " VALUES (?, ?, ?, ?, ?)", (run["id"], attempt, kind, agent_id, time.time()))


def result(row: sqlite3.Row) -> Any:
    return json.loads(row["result_json"]) if row["result_json"] else None
