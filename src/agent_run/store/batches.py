"""Queries on `batches`, `batch_runs` and `batch_attempts`. The daemon is their only writer."""

import json
import sqlite3
import time
from typing import Any

from agent_run.domain.batch_states import (
    BATCH_ENDED,
    BATCH_SETTLED,
    BatchState,
    IllegalTransition,
    RunState,
    check_batch_transition,
    check_run_transition,
)
from agent_run.store.db import one, sql_list
from agent_run.store.events import append_event

ENDED_BATCH_SQL = sql_list(BATCH_ENDED)
_RUN_LOGGED = ("state", "score", "rank", "attempt", "merged_sha")


def log_batch(conn: sqlite3.Connection, batch_id: str, data: dict[str, Any]) -> None:
    """A `batch` event: it moves the global revision, which long-polls and `--follow` watch."""
    append_event(conn, agent_id=batch_id, execution_id=batch_id, kind="batch", data=data)


def insert_batch(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    now = time.time()
    conn.execute(
        "INSERT INTO batches (id, request_id, request_hash, workflow, config_json, project_root,"
        " project_subdir, base_ref, base_sha, base_branch, worktree_root, state, created_at,"
        " updated_at) VALUES (:id, :request_id, :request_hash, :workflow, :config_json,"
        " :project_root, :project_subdir, :base_ref, :base_sha, :base_branch, :worktree_root,"
        " :state, :now, :now)",
        {"base_branch": None, **row, "state": BatchState.QUEUED.value, "now": now},
    )
    log_batch(conn, row["id"], {"state": BatchState.QUEUED.value})


def insert_run(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    """A queued run; its `prompt` is stored only when it is not its batch's (migration 0016).
    Its worktree and branch are named here before they are made (batches/run_rows.py)."""
    now = time.time()
    row = {
        "parent_run_id": None,
        "worktree": None,
        "branch": None,
        "result_json": None,
        "locked": 0,
        **row,
    }
    conn.execute(
        "INSERT INTO batch_runs (id, batch_id, stage, idx, parent_run_id, title, own_prompt,"
        " profile, worktree, branch, workdir, state, locked, result_json, created_at, updated_at)"
        " VALUES (:id, :batch_id, :stage, :idx, :parent_run_id, :title,"
        " nullif(:prompt, (SELECT json_extract(config_json, '$.prompt') FROM batches"
        " WHERE id = :batch_id)), :profile, :worktree, :branch, :workdir, :state, :locked,"
        " :result_json, :now, :now)",
        {**row, "state": RunState.QUEUED.value, "now": now},
    )
    log_batch(conn, row["batch_id"], {"run": row["id"], "state": RunState.QUEUED.value})


def get_batch(conn: sqlite3.Connection, batch_id: str) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM batches WHERE id = ?", (batch_id,))


def get_batch_by_request(conn: sqlite3.Connection, request_id: str) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM batches WHERE request_id = ?", (request_id,))


def live_batches(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(
        f"SELECT * FROM batches WHERE state NOT IN {ENDED_BATCH_SQL} ORDER BY created_at"
    ).fetchall()


def list_batches(
    conn: sqlite3.Connection,
    *,
    limit: int,
    offset: int,
    project: str | None = None,
    states: list[str] | None = None,
) -> tuple[list[sqlite3.Row], int]:
    """A page of batches, newest first, and the exact total of those matching the filters."""
    where: list[str] = []
    params: list[Any] = []
    if project is not None:
        where.append("project_root = ?")
        params.append(project)
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        params += states
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = conn.execute(f"SELECT count(*) FROM batches{clause}", params).fetchone()[0]
    rows = conn.execute(
        f"SELECT * FROM batches{clause} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        [*params, limit, offset],
    ).fetchall()
    return rows, total


# A run row with its `prompt`: its own, or else its batch's (stored once, in the batch).
_RUN_SQL = (
    "SELECT r.*, coalesce(r.own_prompt, json_extract(b.config_json, '$.prompt')) AS prompt"
    " FROM batch_runs r JOIN batches b ON b.id = r.batch_id"
)


def runs(conn: sqlite3.Connection, batch_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        f"{_RUN_SQL} WHERE r.batch_id = ? ORDER BY CASE r.stage WHEN 'generator' THEN 0"
        " WHEN 'worker' THEN 1 WHEN 'candidate' THEN 1 WHEN 'reviewer' THEN 2 ELSE 3 END, r.idx",
        (batch_id,),
    ).fetchall()


def get_run(conn: sqlite3.Connection, run_id: str) -> sqlite3.Row | None:
    return one(conn, f"{_RUN_SQL} WHERE r.id = ?", (run_id,))


def branch_of_agent(conn: sqlite3.Connection, agent_id: str) -> str | None:
    """The branch of the run an agent is an attempt of (None: no run, or a run without one)."""
    row = conn.execute(
        "SELECT r.branch FROM batch_attempts a JOIN batch_runs r ON r.id = a.run_id"
        " WHERE a.agent_id = ?",
        (agent_id,),
    ).fetchone()
    return row["branch"] if row is not None else None


def attempts_of_batch(conn: sqlite3.Connection, batch_id: str) -> dict[str, list[sqlite3.Row]]:
    """Every run's attempts, in order, by run id."""
    by_run: dict[str, list[sqlite3.Row]] = {}
    for row in conn.execute(
        "SELECT t.* FROM batch_attempts t JOIN batch_runs r ON r.id = t.run_id"
        " WHERE r.batch_id = ? ORDER BY t.run_id, t.attempt",
        (batch_id,),
    ):
        by_run.setdefault(row["run_id"], []).append(row)
    return by_run


def attempts(conn: sqlite3.Connection, run_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM batch_attempts WHERE run_id = ? ORDER BY attempt", (run_id,)
    ).fetchall()


def _set(
    conn: sqlite3.Connection, table: str, fields: dict[str, Any], where: str, params: dict[str, Any]
) -> bool:
    fields = {**fields, "updated_at": time.time()}
    assignments = ", ".join(f"{name} = :{name}" for name in fields)
    cursor = conn.execute(f"UPDATE {table} SET {assignments} WHERE {where}", {**fields, **params})
    return cursor.rowcount == 1


def update_batch(conn: sqlite3.Connection, batch_id: str, **fields: Any) -> None:
    """Fields other than the state (which only `move_batch` changes)."""
    if "state" in fields:
        raise IllegalTransition("a batch's state changes only through move_batch")
    _set(conn, "batches", fields, "id = :id", {"id": batch_id})
    if "cancel_requested" in fields:
        log_batch(conn, batch_id, fields)


def move_batch(
    conn: sqlite3.Connection, batch_id: str, *, expect: BatchState, to: BatchState, **fields: Any
) -> bool:
    """Compare-and-set the batch's state `expect -> to` (and `fields`); IllegalTransition when the
    machine forbids it, False when the batch is no longer in `expect`."""
    check_batch_transition(BatchState(expect), BatchState(to))
    if not _set(
        conn,
        "batches",
        {"state": BatchState(to).value, **fields},
        "id = :id AND state = :expect",
        {"id": batch_id, "expect": BatchState(expect).value},
    ):
        return False
    if BatchState(to) in BATCH_SETTLED and BatchState(to) != BatchState(expect):
        # counted, so each settle is announced once (store/notices.ended_without_notice)
        conn.execute("UPDATE batches SET settles = settles + 1 WHERE id = ?", (batch_id,))
    log_batch(conn, batch_id, {"state": BatchState(to).value, **fields})
    return True


def update_run(conn: sqlite3.Connection, run: sqlite3.Row, **fields: Any) -> None:
    """Fields other than the state (which only `update_run_if` changes)."""
    if "state" in fields:
        raise IllegalTransition("a run's state changes only through update_run_if")
    _set(conn, "batch_runs", fields, "id = :id", {"id": run["id"]})
    log_batch(
        conn,
        run["batch_id"],
        {"run": run["id"], **{k: v for k, v in fields.items() if k in _RUN_LOGGED}},
    )


def update_run_if(
    conn: sqlite3.Connection,
    run: sqlite3.Row,
    *,
    expect_state: str | tuple[str, ...],
    expect_attempt: int,
    **fields: Any,
) -> bool:
    """Compare-and-set: update the run only while it is still in `state` (one or several) at
    `attempt`; False when someone moved it meanwhile (a stop, a rerun, a cancel).
    IllegalTransition when a new `state` is not allowed from every expected one."""
    states = [
        RunState(s) for s in ((expect_state,) if isinstance(expect_state, str) else expect_state)
    ]
    if "state" in fields:
        fields["state"] = RunState(fields["state"]).value
        for old in states:
            check_run_transition(old, RunState(fields["state"]))
    marks = ", ".join(f":s{i}" for i in range(len(states)))
    if not _set(
        conn,
        "batch_runs",
        fields,
        f"id = :id AND attempt = :expect_attempt AND state IN ({marks})",
        {
            "id": run["id"],
            "expect_attempt": expect_attempt,
            **{f"s{i}": s.value for i, s in enumerate(states)},
        },
    ):
        return False
    log_batch(
        conn,
        run["batch_id"],
        {"run": run["id"], **{k: v for k, v in fields.items() if k in _RUN_LOGGED}},
    )
    return True


def begin_attempt(conn: sqlite3.Connection, run: sqlite3.Row, **fields: Any) -> int | None:
    """Begin the run's next attempt: compare-and-set its (state, attempt) as read in `run` to
    (running, attempt + 1), clearing its failure (and setting `fields`). The new attempt number,
    or None when the run moved meanwhile: of two begins from the same row, the second loses."""
    attempt = int(run["attempt"]) + 1
    if not update_run_if(
        conn,
        run,
        expect_state=run["state"],
        expect_attempt=run["attempt"],
        state=RunState.RUNNING,
        attempt=attempt,
        failure=None,
        **fields,
    ):
        return None
    return attempt


def record_attempt(
    conn: sqlite3.Connection, run: sqlite3.Row, *, attempt: int, kind: str, agent_id: str
) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO batch_attempts (run_id, attempt, kind, agent_id, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (run["id"], attempt, kind, agent_id, time.time()),
    )


def result(row: sqlite3.Row) -> Any:
    return json.loads(row["result_json"]) if row["result_json"] else None
