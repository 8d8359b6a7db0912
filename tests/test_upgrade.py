"""Upgrades: a home written by an earlier release migrates and still serves what it served.

tests/fixtures/home_schema5 was made by the code of schema 0005 (two demo agents: one that wrote a
file and answered, one that failed on auth; their executions' plan_json rows as written then). It
is frozen: never regenerate it; a later schema gets a fixture of its own beside it.
"""

import json
import shutil
from pathlib import Path

import pytest

from agent_run.engines.demo import DemoOptions
from agent_run.engines.plan import PLAN_VERSION, ExecutionPlan, load_plan
from agent_run.system.home import Home
from tests.harness import DaemonProcess, db_rows, remove_home, short_tmpdir

FIXTURE = Path(__file__).parent / "fixtures" / "home_schema5"
MIGRATIONS = Path(__file__).parent.parent / "src" / "agent_run" / "store" / "migrations"
ANSWERED, FAILED = "ag_01m8qxfeepqe5jy66a", "ag_01m8qxfgxe657rcdmj"


@pytest.fixture
def old_home():
    home = Home(short_tmpdir() / "h")
    shutil.copytree(FIXTURE, home.root)
    home.ensure()
    yield home
    remove_home(home)


def test_a_schema5_home_migrates_and_serves_agent_answer_and_transcript(old_home):
    assert (
        db_rows(old_home, "PRAGMA user_version")[0][0] == 5
    )  # the copy: the fixture stays untouched
    daemon = DaemonProcess(old_home).start()
    try:
        latest = max(int(p.name[:4]) for p in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql"))
        assert db_rows(old_home, "PRAGMA user_version")[0][0] == latest

        answered = daemon.call("agent", {"agent_id": ANSWERED})
        assert (answered["state"], answered["runtime"], answered["engine"]) == (
            "succeeded",
            "demo",
            "demo",
        )
        assert daemon.call("answer", {"agent_id": ANSWERED})["text"] == "the frozen answer"
        items = daemon.call("transcript", {"agent_id": ANSWERED})["items"]
        assert [(i["role"], i["name"], i["content"]) for i in items] == [
            ("assistant", None, "step 1/1"),
            ("tool_call", "Write", '{"file_path": "out.txt", "content": "hello"}'),
            ("tool", items[2]["name"], "File created successfully at: out.txt"),
            ("assistant", None, "the frozen answer"),
        ]

        failed = daemon.call("agent", {"agent_id": FAILED})
        assert (failed["state"], failed["failure_kind"]) == ("failed", "auth_failed")
        listed = daemon.call("list_agents", {})
        assert {a["id"] for a in listed["items"]} == {ANSWERED, FAILED}
    finally:
        daemon.stop()


# -- the 0.1.0 release's home -------------------------------------------------------------------
# tests/fixtures/home_0_1_0 was written by agent-run 0.1.0 (main at 2353e5c): a demo agent that
# wrote a file and answered, with a command notice delivered; one that failed on auth; one on the
# account `keyed/work`, resumed once (two executions); a ranked batch of two candidates and a
# reviewer each, completed. Frozen: never regenerate it; the next release gets a fixture beside it.
RELEASE_0_1_0 = Path(__file__).parent / "fixtures" / "home_0_1_0"
V010_ANSWERED, V010_FAILED, V010_RESUMED = (
    "ag_01m995t147qy9yaxp5",
    "ag_01m995t47amx31pb1a",
    "ag_01m995t74b3zh8y37b",
)
V010_BATCH = "bt_01m995tdztrh6vq6zd"


@pytest.fixture
def release_home():
    home = Home(short_tmpdir() / "h")
    shutil.copytree(RELEASE_0_1_0, home.root)
    home.ensure()
    yield home
    remove_home(home)


def test_a_0_1_0_home_serves_its_agents_answers_and_accounts(release_home):
    assert db_rows(release_home, "PRAGMA user_version")[0][0] == 17  # as 0.1.0 left it
    daemon = DaemonProcess(release_home).start()
    try:
        listed = daemon.call("list_agents", {"limit": 50})
        assert len(listed["items"]) == 7
        answered = daemon.call("agent", {"agent_id": V010_ANSWERED})
        assert (answered["state"], answered["answer_verified"]) == ("succeeded", True)
        assert daemon.call("answer", {"agent_id": V010_ANSWERED})["text"] == "the frozen answer"
        roles = [i["role"] for i in daemon.call("transcript", {"agent_id": V010_ANSWERED})["items"]]
        assert roles[-1] == "assistant" and "tool_call" in roles
        failed = daemon.call("agent", {"agent_id": V010_FAILED})
        assert (failed["state"], failed["failure_kind"]) == ("failed", "auth_failed")
        resumed = daemon.call("agent", {"agent_id": V010_RESUMED})
        assert (resumed["runtime"], resumed["account"], resumed["execution"]["number"]) == (
            "keyed",
            "work",
            2,
        )
        answer = daemon.call("answer", {"agent_id": V010_RESUMED})["text"]
        assert answer == "Earlier in this session: first turn"
        accounts = daemon.call("accounts", {})["accounts"]
        assert ("keyed", "work") in {(a["runtime"], a["account"]) for a in accounts}
        status = daemon.call("delivery_status", {"agent_id": V010_ANSWERED})
        assert status["transport"] == "command" and status["state"] == "delivered"
    finally:
        daemon.stop()


def test_a_0_1_0_batch_keeps_its_ranking_and_its_agents_resume(release_home):
    daemon = DaemonProcess(release_home).start()
    try:
        batch = daemon.call("batch", {"batch_id": V010_BATCH})
        assert (batch["workflow"], batch["state"]) == ("ranked", "completed")
        ranked = sorted((r["rank"], r["score"]) for r in batch["runs"] if r.get("rank"))
        assert ranked == [(1, 76.0), (2, 66.0)]
        assert any(b["id"] == V010_BATCH for b in daemon.call("list_batches", {})["items"])
        # The 0.1.0 session goes on under this version: a new execution of the same agent, in
        # the folder it worked in then (a fixed path, as every stored workdir is absolute).
        Path(daemon.call("agent", {"agent_id": V010_ANSWERED})["workdir"]).mkdir(
            parents=True, exist_ok=True
        )
        again = daemon.call("resume", {"agent_id": V010_ANSWERED, "prompt": "recall: yes"})
        assert again["execution"]["number"] == 2
        done = daemon.call("wait", {"agent_id": V010_ANSWERED, "timeout_seconds": 90})
        assert done["agent"]["state"] == "succeeded", done["agent"]["failure_kind"]
        text = daemon.call("answer", {"agent_id": V010_ANSWERED})["text"]
        assert "the frozen answer" in text
    finally:
        daemon.stop()


# What the frozen plans say, written out by hand: a changed fixture or a lossy upgrade shows.
FROZEN_PLAN = {
    "runtime": "demo",
    "engine": "demo",
    "model": "demo-1",
    "workdir": "/tmp/art-u_nr706c",
    "profile": "write",
    "stall_seconds": 60.0,
    "wall_seconds": None,
    "cancel_grace_seconds": 1.0,
    "resume_session_id": None,
    "read_roots": [],
    "worker_tools": ["finish"],
    "storage_buffer_bytes": 4194304,
    "storage_wait_seconds": 600.0,
}
FROZEN_TASKS = {
    ANSWERED: "steps: 1\nwrite: out.txt = hello\nanswer: the frozen answer",
    FAILED: "fail: auth",
}


def test_the_frozen_plans_are_version_1_and_load_as_the_current_plan_with_their_fields(old_home):
    rows = db_rows(old_home, "SELECT id, agent_id, plan_json FROM executions ORDER BY id")
    assert [r["agent_id"] for r in rows] == [ANSWERED, FAILED]
    for row in rows:
        stored = json.loads(row["plan_json"])
        assert "plan_version" not in stored  # version 1, as written then
        assert stored["prompt"] == FROZEN_TASKS[row["agent_id"]]
        assert stored["runtime_config"]["base_url"] is None  # v1 kept every engine's keys

        plan = load_plan(row["plan_json"])
        assert isinstance(plan, ExecutionPlan) and plan.plan_version == PLAN_VERSION
        dumped = plan.model_dump(mode="json")
        assert "prompt" not in dumped  # the execution's prompt column holds it
        assert {k: dumped[k] for k in FROZEN_PLAN} == FROZEN_PLAN
        assert (plan.agent_id, plan.execution_id) == (row["agent_id"], row["id"])
        assert plan.engine_home == f"/tmp/art-57cde9ro/h/homes/demo/{row['agent_id']}"
        options = plan.runtime_config
        assert isinstance(options, DemoOptions)  # the demo engine's own options, typed
        assert (options.models, options.default_model, options.auth) == (["demo-1"], "demo-1", None)
        assert "base_url" not in dumped["runtime_config"]  # the keys the demo never read go
        assert load_plan(plan.to_json()) == plan  # and the upgraded plan round-trips


def test_after_the_upgrade_the_task_is_stored_once_and_still_served(old_home):
    """Schema 0009 drops `agents.task` and the prompt inside version-1 plans: the first
    execution's `prompt` is the one copy, and `agent` and `list_agents` serve it from there."""
    tasks = {r["id"]: r["task"] for r in db_rows(old_home, "SELECT id, task FROM agents")}
    assert tasks[ANSWERED].endswith("answer: the frozen answer") and tasks[FAILED] == "fail: auth"
    assert all('"prompt"' in r[0] for r in db_rows(old_home, "SELECT plan_json FROM executions"))
    daemon = DaemonProcess(old_home).start()
    try:
        columns = {c["name"] for c in db_rows(old_home, "PRAGMA table_info(agents)")}
        assert "task" not in columns
        plans = [json.loads(r[0]) for r in db_rows(old_home, "SELECT plan_json FROM executions")]
        assert len(plans) == 2 and all("prompt" not in p and "plan_version" not in p for p in plans)
        for agent_id, task in tasks.items():
            assert daemon.call("agent", {"agent_id": agent_id})["task"] == task
        previews = {a["id"]: a["task_preview"] for a in daemon.call("list_agents", {})["items"]}
        assert previews == {ANSWERED: "steps: 1", FAILED: "fail: auth"}
        resumed = daemon.call("resume", {"agent_id": ANSWERED, "prompt": "answer: thawed"})
        assert resumed["task"] == tasks[ANSWERED]  # still the first execution's
    finally:
        daemon.stop()


def test_schema_15_counts_settled_batches_once_and_keeps_their_notices():
    """0014: a batch settled before it counts one settle, and the notice it already has (subject
    the bare batch id) is that settle's, so the upgrade announces nothing twice."""
    import sqlite3

    from agent_run.store import db as store_db
    from agent_run.store import notices as notices_q

    path = short_tmpdir("aru-") / "state.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    for number, _name, sql in store_db.migrations():
        if number <= 13:
            for statement in store_db._split_sql(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
    for batch_id, state in (("bt_done", "completed"), ("bt_live", "running")):
        conn.execute(
            "INSERT INTO batches (id, request_hash, workflow, config_json, project_root,"
            " project_subdir, base_ref, base_sha, worktree_root, state, created_at, updated_at)"
            " VALUES (?, 'h', 'repeated', '{}', '/p', '', 'HEAD', 'abc', '/w', ?, 1, 1)",
            (batch_id, state),
        )
        conn.execute(
            "INSERT INTO notify_targets (batch_id, target_json, created_at) VALUES (?, ?, 1)",
            (batch_id, '{"transport": "command", "argv": ["/bin/true"]}'),
        )
    conn.execute(
        "INSERT INTO notices (id, target_id, subject, transport, body_json, state,"
        " next_attempt_at, created_at, updated_at)"
        " VALUES ('nt_old', 1, 'bt_done', 'command', '{}', 'delivered', 1, 1, 1)"
    )
    assert store_db.migrate(conn) >= 14
    settles = {r["id"]: r["settles"] for r in conn.execute("SELECT id, settles FROM batches")}
    assert settles == {"bt_done": 1, "bt_live": 0}
    assert conn.execute("SELECT subject FROM notices").fetchall()[0][0] == "bt_done:1"
    assert notices_q.ended_without_notice(conn) == []  # nothing owed, nothing made twice
    conn.close()


def test_a_store_at_the_newest_schema_connects_while_another_writer_holds_the_lock():
    """Every supervisor connects through `migrate`: at the newest schema it takes no write lock,
    so a supervisor starts while the daemon (here a second connection) is mid-write."""
    from agent_run.store import db as store_db

    path = short_tmpdir("aru-") / "state.db"
    store_db.connect(path).close()  # migrated to the newest
    writer = store_db.connect(path)
    writer.execute("BEGIN IMMEDIATE")
    try:
        conn = store_db.connect(path, busy_timeout_ms=50)  # would wait, then raise "locked"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store_db.migrations()[-1][0]
        conn.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
