"""The task text is stored once: an agent's task is its first execution's `prompt` (not a column
of `agents`, not in the plan), and `agent`, `list_agents` and `answer` still serve it; a batch
run whose prompt is its batch's keeps no copy of it (the batch's config holds it)."""

import json
from typing import Any

from agent_run.store import batches as batches_q
from agent_run.store.db import connect, write
from agent_run.system.home import Home
from tests.batch_harness import runs_of, wait_batch
from tests.harness import db_rows
from tests.test_batch_states import (
    _batch_row,
    _database_at,
    _insert_schema5_batch,
    _insert_schema5_run,
    _run_row,
)


def cells_holding(home: Home, text: str) -> dict[tuple[str, str], int]:
    """(table, column) -> how many rows of the state database hold `text` in that column."""
    found: dict[tuple[str, str], int] = {}
    tables = db_rows(home, "SELECT name FROM sqlite_master WHERE type = 'table'")
    for (table,) in tables:
        for column in db_rows(home, f"PRAGMA table_info({table})"):
            name = column["name"]
            count = db_rows(
                home,
                f'SELECT count(*) FROM "{table}" WHERE instr(CAST("{name}" AS TEXT), ?) > 0',
                (text,),
            )[0][0]
            if count:
                found[(table, name)] = count
    return found


def test_an_agents_task_and_a_resumes_prompt_are_each_stored_once(daemon: Any, workdir: Any):
    task = "answer: first\nthe task marker 7f3a"  # a line without a colon: no directive
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    again = "answer: second\nthe resume marker 9c1d"
    daemon.call("resume", {"agent_id": agent["id"], "prompt": again})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "succeeded", done
    for marker in ("marker 7f3a", "marker 9c1d"):
        held = cells_holding(daemon.home, marker)
        assert held == {("executions", "prompt"): 1}, (marker, held)
    assert daemon.call("agent", {"agent_id": agent["id"]})["task"] == task  # not the resume's
    [listed] = daemon.call("list_agents", {})["items"]
    assert listed["task_preview"] == "answer: first"
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "second"


def test_a_repeated_batch_keeps_its_task_in_its_config_and_in_each_agents_execution_only(
    batch_project,
):
    """A run whose prompt is its batch's keeps no copy (migration 0016): the text is in the
    batch's `config_json` once, and in the first execution of each agent a run started (its
    input); a rerun starts its new agent from the batch's prompt, read through the store."""
    task = "answer: done\nthe batch marker 4e2b"
    daemon = batch_project.daemon
    done = batch_project.finish("repeated", runs=1, prompt=task)
    assert done["state"] == "completed", done
    [run] = runs_of(done, "worker")
    assert cells_holding(daemon.home, "marker 4e2b") == {
        ("batches", "config_json"): 1,
        ("executions", "prompt"): 1,
    }
    daemon.call("run_rerun", {"run_id": run["id"]})
    again = wait_batch(daemon, done["id"], states=("completed",))
    [rerun] = runs_of(again, "worker")
    assert [a["kind"] for a in rerun["attempts"]] == ["start", "rerun"]
    assert cells_holding(daemon.home, "marker 4e2b") == {
        ("batches", "config_json"): 1,
        ("executions", "prompt"): 2,  # one per agent: each attempt is its own agent
    }
    for attempt in rerun["attempts"]:
        assert daemon.call("agent", {"agent_id": attempt["agent_id"]})["task"] == task


def test_a_run_keeps_its_own_prompt_only_when_it_is_not_its_batchs(tmp_path):
    """Migration 0016 on rows written before it: a run's copy of its batch's prompt goes, a run
    with a prompt of its own (a candidate's, a generated worker's) keeps it; both still read."""
    path = tmp_path / "state.db"
    old = _database_at(path, 13)
    config = json.dumps({"prompt": "the batch prompt"})
    with write(old):
        _insert_schema5_batch(old, {**_batch_row("bt_1"), "config_json": config}, 1.0)
        for idx, run_id, prompt in (
            (1, "rn_same", "the batch prompt"),
            (2, "rn_own", "a task of its own"),
        ):
            _insert_schema5_run(old, {**_run_row(run_id, "bt_1", idx=idx), "prompt": prompt}, 1.0)
    old.close()

    conn = connect(path)  # migrates
    stored = dict(conn.execute("SELECT id, own_prompt FROM batch_runs").fetchall())
    assert stored == {"rn_same": None, "rn_own": "a task of its own"}
    served = {r["id"]: r["prompt"] for r in batches_q.runs(conn, "bt_1")}
    assert served == {"rn_same": "the batch prompt", "rn_own": "a task of its own"}
    with write(conn):  # and a run written now is stored the same way
        batches_q.insert_run(
            conn, {**_run_row("rn_new", "bt_1", idx=3), "prompt": "the batch prompt"}
        )
    assert (
        conn.execute("SELECT own_prompt FROM batch_runs WHERE id = 'rn_new'").fetchone()[0] is None
    )
    assert batches_q.get_run(conn, "rn_new")["prompt"] == "the batch prompt"
    conn.close()
