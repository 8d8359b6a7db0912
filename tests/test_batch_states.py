"""Batch and run state machines: every allowed and refused transition, the store's
compare-and-set enforcement on a real SQLite file, workflow and stage names checked in Python,
and the migration that took their CHECKs out of the tables (data preserved)."""

import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import product
from typing import get_args

import pytest

from agent_run.batches.scheduler import settled_state
from agent_run.batches.workflows import WORKFLOWS, RunSpec, check_stage, workflow_named
from agent_run.domain import batch_models as bm
from agent_run.domain.batch_states import (
    BATCH_ENDED,
    RUN_SETTLED,
    BatchState,
    IllegalTransition,
    RunState,
    check_batch_transition,
    check_run_transition,
)
from agent_run.domain.errors import InvalidRequest
from agent_run.store import batches as batches_q
from agent_run.store.db import connect, migrations, write

B, R = BatchState, RunState

# Written out by hand (not derived from the module's table), so a change to either shows.
BATCH_ALLOWED = {
    (B.QUEUED, B.RUNNING),
    (B.QUEUED, B.BLOCKED),
    (B.QUEUED, B.COMPLETED),
    (B.QUEUED, B.FAILED),
    (B.QUEUED, B.CANCELLED),
    (B.RUNNING, B.BLOCKED),
    (B.RUNNING, B.COMPLETED),
    (B.RUNNING, B.FAILED),
    (B.RUNNING, B.CANCELLED),
    (B.BLOCKED, B.RUNNING),
    (B.BLOCKED, B.CANCELLED),
    (B.COMPLETED, B.RUNNING),
    (B.FAILED, B.RUNNING),
}
RUN_ALLOWED = {
    (R.QUEUED, R.RUNNING),
    (R.QUEUED, R.CANCELLED),
    (R.RUNNING, R.SUCCEEDED),
    (R.RUNNING, R.FAILED),
    (R.RUNNING, R.CANCELLED),
    (R.SUCCEEDED, R.RUNNING),
    (R.SUCCEEDED, R.QUEUED),
    (R.FAILED, R.RUNNING),
    (R.FAILED, R.QUEUED),
    (R.FAILED, R.CANCELLED),  # a staged batch's blocking run stopped: set aside
    (R.CANCELLED, R.RUNNING),
    (R.CANCELLED, R.QUEUED),
}


@pytest.mark.parametrize("old, new", [(o, n) for o, n in product(B, B) if o != n])
def test_batch_transition_table(old, new):
    if (old, new) in BATCH_ALLOWED:
        check_batch_transition(old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}"):
            check_batch_transition(old, new)


@pytest.mark.parametrize("old, new", [(o, n) for o, n in product(R, R) if o != n])
def test_run_transition_table(old, new):
    if (old, new) in RUN_ALLOWED:
        check_run_transition(old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}"):
            check_run_transition(old, new)


def test_staying_in_a_state_is_no_transition_and_cancelled_batches_never_reopen():
    for state in B:
        check_batch_transition(state, state)  # e.g. a blocked batch whose reason changes
    for state in R:
        check_run_transition(state, state)
    assert BATCH_ENDED == {B.COMPLETED, B.FAILED, B.CANCELLED}
    assert RUN_SETTLED == {R.SUCCEEDED, R.FAILED, R.CANCELLED}
    assert [s for s in B if s.ended] == [B.COMPLETED, B.FAILED, B.CANCELLED]


def test_the_views_literals_name_exactly_the_enums_states():
    assert set(get_args(bm.BatchState)) == {s.value for s in B}
    assert set(get_args(bm.RunState)) == {s.value for s in R}
    assert set(get_args(bm.Workflow)) == set(WORKFLOWS)
    assert set(get_args(bm.Stage)) == {stage for w in WORKFLOWS.values() for stage in w.stages}


# -- the store enforces the machine ---------------------------------------------------------------


def _batch_row(batch_id: str, workflow: str = "repeated") -> dict:
    return {
        "id": batch_id,
        "request_id": None,
        "request_hash": "h",
        "workflow": workflow,
        "config_json": "{}",
        "project_root": "/p",
        "project_subdir": "",
        "base_ref": "HEAD",
        "base_sha": "0" * 40,
        "worktree_root": "/w",
    }


def _run_row(run_id: str, batch_id: str, stage: str = "worker", idx: int = 1) -> dict:
    return {
        "id": run_id,
        "batch_id": batch_id,
        "stage": stage,
        "idx": idx,
        "title": "t",
        "prompt": "p",
        "profile": "write",
        "workdir": "/w",
    }


@pytest.fixture
def conn(tmp_path):
    conn = connect(tmp_path / "state.db")
    with write(conn):
        batches_q.insert_batch(conn, _batch_row("bt_1"))
        batches_q.insert_run(conn, _run_row("rn_1", "bt_1"))
    yield conn
    conn.close()


def _state(conn, table, row_id):
    return conn.execute(f"SELECT state FROM {table} WHERE id = ?", (row_id,)).fetchone()[0]


def test_move_batch_is_a_compare_and_set_on_its_state(conn):
    with write(conn):
        assert batches_q.move_batch(conn, "bt_1", expect=B.QUEUED, to=B.RUNNING)
        assert not batches_q.move_batch(
            conn, "bt_1", expect=B.QUEUED, to=B.RUNNING
        )  # moved already
    assert _state(conn, "batches", "bt_1") == "running"
    event = conn.execute(
        "SELECT data FROM events WHERE kind = 'batch' ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    assert '"running"' in event[0]


def test_a_refused_batch_transition_raises_and_writes_nothing(conn):
    with write(conn):
        assert batches_q.move_batch(conn, "bt_1", expect=B.QUEUED, to=B.CANCELLED)
    with pytest.raises(IllegalTransition, match="cancelled -> running"), write(conn):
        batches_q.move_batch(conn, "bt_1", expect=B.CANCELLED, to=B.RUNNING)
    assert _state(conn, "batches", "bt_1") == "cancelled"


def test_state_changes_only_through_the_compare_and_set(conn):
    run = batches_q.get_run(conn, "rn_1")
    with pytest.raises(IllegalTransition), write(conn):
        batches_q.update_batch(conn, "bt_1", state="running")
    with pytest.raises(IllegalTransition), write(conn):
        batches_q.update_run(conn, run, state="running")
    with write(conn):
        batches_q.update_batch(conn, "bt_1", cancel_requested=1)  # other fields stay free
        batches_q.update_run(conn, run, score=3.5)
    assert _state(conn, "batches", "bt_1") == "queued"


def test_update_run_if_checks_the_transition_from_every_expected_state(conn):
    run = batches_q.get_run(conn, "rn_1")
    with pytest.raises(IllegalTransition, match="queued -> succeeded"), write(conn):
        batches_q.update_run_if(
            conn, run, expect_state=R.QUEUED, expect_attempt=0, state=R.SUCCEEDED
        )
    with pytest.raises(IllegalTransition), write(conn):  # allowed from running, refused from queued
        batches_q.update_run_if(
            conn, run, expect_state=(R.RUNNING, R.QUEUED), expect_attempt=0, state=R.FAILED
        )
    assert _state(conn, "batch_runs", "rn_1") == "queued"
    with write(conn):
        assert batches_q.update_run_if(
            conn, run, expect_state=R.QUEUED, expect_attempt=0, state=R.RUNNING, attempt=1
        )
        assert not batches_q.update_run_if(
            conn, run, expect_state=R.RUNNING, expect_attempt=0, state=R.FAILED
        )  # stale attempt
        assert batches_q.update_run_if(
            conn, run, expect_state=R.RUNNING, expect_attempt=1, state=R.FAILED
        )
    assert _state(conn, "batch_runs", "rn_1") == "failed"


def test_begin_attempt_is_a_compare_and_set_a_second_concurrent_begin_loses(tmp_path, conn):
    """Two daemons' connections begin the same run's next attempt from the same row at once:
    exactly one commits attempt 1; the other finds the run moved and writes nothing."""
    path = tmp_path / "state.db"
    run = batches_q.get_run(conn, "rn_1")
    barrier = threading.Barrier(2)

    def begin(_: int) -> int | None:
        mine = connect(path)
        try:
            barrier.wait(timeout=30)
            with write(mine):
                return batches_q.begin_attempt(mine, run, agent_id=None)
        finally:
            mine.close()

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(begin, range(2)))
    assert sorted(results, key=lambda r: r is None) == [1, None]
    fresh = batches_q.get_run(conn, "rn_1")
    assert (fresh["state"], fresh["attempt"], fresh["failure"]) == ("running", 1, None)
    logged = [
        json.loads(row[0])
        for row in conn.execute("SELECT data FROM events WHERE kind = 'batch'").fetchall()
    ]
    assert [e for e in logged if e.get("attempt") == 1] == [
        {"run": "rn_1", "state": "running", "attempt": 1}
    ]  # the loser logged nothing
    with write(conn):  # from the fresh row the next begin wins, clearing the failure
        assert batches_q.update_run_if(
            conn, fresh, expect_state=R.RUNNING, expect_attempt=1, state=R.FAILED, failure="x"
        )
        failed = batches_q.get_run(conn, "rn_1")
        assert batches_q.begin_attempt(conn, failed) == 2
        assert batches_q.begin_attempt(conn, failed) is None  # stale row
    again = batches_q.get_run(conn, "rn_1")
    assert (again["state"], again["attempt"], again["failure"]) == ("running", 2, None)


# -- names in Python ------------------------------------------------------------------------------


def test_unknown_workflow_and_stage_are_typed_errors_naming_the_field():
    with pytest.raises(InvalidRequest) as exc:
        workflow_named("fifth")
    assert exc.value.field == "workflow"
    with pytest.raises(InvalidRequest) as exc:
        check_stage(workflow_named("ranked"), "validator")
    assert exc.value.field == "stage"
    check_stage(workflow_named("validated"), "validator")


def test_every_workflows_runs_are_of_its_own_stages():
    cfg = {"prompt": "p", "profile": "write", "runs": 2, "reviewers": 1}
    for workflow in WORKFLOWS.values():
        specs: list[RunSpec] = workflow.initial_runs(cfg)
        assert specs and all(spec.stage in workflow.stages for spec in specs)


def test_the_retry_policy_is_the_workflows():
    assert WORKFLOWS["generated"].retries("generator") == 1
    assert WORKFLOWS["generated"].retries("worker") == 0
    assert all(
        WORKFLOWS[name].retries(stage) == 0
        for name in ("repeated", "ranked", "validated")
        for stage in WORKFLOWS[name].stages
    )


def _succeed(conn, run_id: str, **fields) -> None:
    with write(conn):
        run = batches_q.get_run(conn, run_id)
        attempt = batches_q.begin_attempt(conn, run)
        batches_q.update_run_if(
            conn,
            batches_q.get_run(conn, run_id),
            expect_state=R.RUNNING,
            expect_attempt=attempt,
            state=R.SUCCEEDED,
            **fields,
        )


@pytest.mark.parametrize(
    "workflow, first_stage, result",
    [
        ("generated", "generator", [{"title": "a", "prompt": "p"}]),
        ("ranked", "candidate", None),
        ("validated", "worker", None),
    ],
)
def test_a_batch_whose_next_stage_is_due_is_running_not_completed(
    tmp_path, workflow, first_stage, result
):
    """A verdict that lands between a decision's look at the next stage and its settling left
    a validated batch completed without its validator (CI, stop 24): a batch is complete only
    when its workflow adds no more runs."""
    cfg = {"prompt": "p", "runs": 1, "reviewers": 1, "profile": "write"}
    conn = connect(tmp_path / "state.db")
    with write(conn):
        batches_q.insert_batch(
            conn, {**_batch_row("bt_s", workflow), "config_json": json.dumps(cfg)}
        )
        batches_q.insert_run(conn, _run_row("rn_s", "bt_s", stage=first_stage))
    _succeed(conn, "rn_s", result_json=json.dumps(result) if result is not None else None)
    runs = batches_q.runs(conn, "bt_s")
    assert workflow_named(workflow).follow_on_runs(cfg, runs)  # the next stage is due
    assert settled_state(workflow_named(workflow), cfg, runs) == (B.RUNNING, None)
    with write(conn):
        for spec in workflow_named(workflow).follow_on_runs(cfg, runs):
            row = _run_row(f"rn_{spec.stage}", "bt_s", stage=spec.stage, idx=spec.idx)
            batches_q.insert_run(conn, {**row, "parent_run_id": spec.parent_run_id})
    for run in batches_q.runs(conn, "bt_s"):
        if run["state"] == R.QUEUED:
            _succeed(conn, run["id"])
    runs = batches_q.runs(conn, "bt_s")
    assert not workflow_named(workflow).follow_on_runs(cfg, runs)
    assert settled_state(workflow_named(workflow), cfg, runs) == (B.COMPLETED, None)
    assert settled_state(workflow_named(workflow), cfg, []) == (B.QUEUED, None)  # none made yet
    conn.close()


@pytest.mark.parametrize(
    "workflow, stage, reason",
    [
        ("ranked", "candidate", "no candidate succeeded: every one was stopped, nothing to rank"),
        ("validated", "worker", "every worker was stopped: nothing to validate"),
    ],
)
def test_a_staged_batch_whose_every_run_was_stopped_fails_never_completes(
    tmp_path, workflow, stage, reason
):
    """A stopped validated worker or ranked candidate once left the batch `completed` with no
    verdict (or a ranking over a score of 0). A stopped run is set aside now (the next stage goes
    on with the runs that remain); with none left the batch fails, saying why."""
    cfg = {"prompt": "p", "runs": 1, "reviewers": 1, "profile": "write"}
    conn = connect(tmp_path / "state.db")
    with write(conn):
        batches_q.insert_batch(
            conn, {**_batch_row("bt_c", workflow), "config_json": json.dumps(cfg)}
        )
        batches_q.insert_run(conn, {**_run_row("rn_c", "bt_c", stage=stage), "title": "worker 1"})
        run = batches_q.get_run(conn, "rn_c")
        attempt = batches_q.begin_attempt(conn, run)
        batches_q.update_run_if(
            conn,
            batches_q.get_run(conn, "rn_c"),
            expect_state=R.RUNNING,
            expect_attempt=attempt,
            state=R.CANCELLED,
            failure="stopped",
        )
    assert settled_state(workflow_named(workflow), cfg, batches_q.runs(conn, "bt_c")) == (
        B.FAILED,
        reason,
    )
    conn.close()


# -- the migration ----------------------------------------------------------------------------------


def _insert_schema5_batch(conn: sqlite3.Connection, row: dict, now: float) -> None:
    """A batch row as schema 5 had it (today's insert_batch names columns added later)."""
    conn.execute(
        f"INSERT INTO batches ({', '.join(row)}, state, created_at, updated_at)"
        f" VALUES ({', '.join(':' + k for k in row)}, 'queued', :now, :now)",
        {**row, "now": now},
    )


def _insert_schema5_run(conn: sqlite3.Connection, row: dict, now: float) -> None:
    """A run row as schema 5 had it (its `prompt` column went in 0016)."""
    row = {"parent_run_id": None, "worktree": None, "branch": None, "result_json": None, **row}
    conn.execute(
        f"INSERT INTO batch_runs ({', '.join(row)}, state, created_at, updated_at)"
        f" VALUES ({', '.join(':' + k for k in row)}, 'queued', :now, :now)",
        {**row, "now": now},
    )


def _all_runs(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    ids = [r[0] for r in conn.execute("SELECT id FROM batch_runs ORDER BY id, batch_id")]
    return [batches_q.get_run(conn, run_id) for run_id in ids]


def _database_at(path, version: int) -> sqlite3.Connection:
    """A state.db built by the migrations up to `version` only: the schema as it was then."""
    conn = connect(path, apply_migrations=False)
    for number, _name, sql in migrations():
        if number > version:
            break
        with write(conn):
            for statement in (
                s.strip()
                for s in "\n".join(
                    line for line in sql.splitlines() if not line.strip().startswith("--")
                ).split(";")
            ):
                if statement:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
    return conn


def test_migration_drops_the_name_checks_and_keeps_every_row(tmp_path):
    path = tmp_path / "state.db"
    old = _database_at(path, 5)
    now = time.time()
    with write(old):
        _insert_schema5_batch(old, _batch_row("bt_old", "ranked"), now)
        old.execute(
            "UPDATE batches SET state = 'blocked', state_reason = 'r', cancel_requested = 1,"
            " ended_at = ? WHERE id = 'bt_old'",
            (now,),
        )
        _insert_schema5_run(
            old,
            {
                **_run_row("rn_c", "bt_old", "candidate"),
                "worktree": "/w/c",
                "branch": "agent-run/bt_old/candidate-1",
                "result_json": '{"commits": ["a"]}',
            },
            now,
        )
        _insert_schema5_run(
            old, {**_run_row("rn_r", "bt_old", "reviewer"), "parent_run_id": "rn_c"}, now
        )
        old.execute(
            "UPDATE batch_runs SET state = 'succeeded', attempt = 2, locked = 1, score = 87.5, rank = 1,"
            " verify_passed = 1, verify_output = 'exit 0' WHERE id = 'rn_c'"
        )
        old.execute(
            "INSERT INTO batch_attempts (run_id, attempt, kind, agent_id, created_at)"
            " VALUES ('rn_c', 1, 'start', 'ag_1', ?), ('rn_c', 2, 'rerun', 'ag_2', ?)",
            (now, now),
        )
    with pytest.raises(sqlite3.IntegrityError), write(old):  # the old schema pinned the names
        _insert_schema5_batch(old, _batch_row("bt_fifth", "fifth"), now)
    # Compared on the schema-5 columns: later migrations add columns (e.g. 0012's base_branch).
    columns = {
        t: [r[1] for r in old.execute(f"PRAGMA table_info({t})")]
        for t in ("batches", "batch_runs", "batch_attempts")
    }
    before = {
        t: [tuple(r) for r in old.execute(f"SELECT {', '.join(c)} FROM {t} ORDER BY 1, 2")]
        for t, c in columns.items()
    }
    old.close()

    conn = connect(path)  # migrates
    assert conn.execute("PRAGMA user_version").fetchone()[0] == migrations()[-1][0]
    after = {
        t: [tuple(r) for r in conn.execute(f"SELECT {', '.join(c)} FROM {t} ORDER BY 1, 2")]
        for t, c in columns.items()
        if t != "batch_runs"
    }
    # A run's prompt is read through the store since 0016 (its own, else its batch's).
    after["batch_runs"] = [tuple(r[c] for c in columns["batch_runs"]) for r in _all_runs(conn)]
    assert after == before
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert not conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'old_%'").fetchall()
    assert conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'batch_runs_batch'"
    ).fetchone()
    with write(conn):  # a fifth workflow and a new stage need no table rebuild now
        batches_q.insert_batch(conn, _batch_row("bt_fifth", "fifth"))
        batches_q.insert_run(conn, _run_row("rn_new", "bt_fifth", "novel"))
    with pytest.raises(sqlite3.IntegrityError), write(conn):  # the foreign keys still hold
        batches_q.insert_run(conn, _run_row("rn_orphan", "bt_missing"))
    with pytest.raises(sqlite3.IntegrityError), write(conn):  # and the state CHECK still does
        conn.execute("UPDATE batches SET state = 'paused' WHERE id = 'bt_old'")
    with pytest.raises(sqlite3.IntegrityError), write(conn):
        conn.execute(
            "INSERT INTO batch_attempts (run_id, attempt, kind, agent_id, created_at)"
            " VALUES ('rn_missing', 1, 'start', 'ag', 0)"
        )
    conn.close()
