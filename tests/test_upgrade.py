"""Upgrades: a home written by an earlier release migrates and still serves what it served.

tests/fixtures/home_schema5 was made by the code of schema 0005 (two demo agents: one that wrote a
file and answered, one that failed on auth; their executions' plan_json rows as written then). It
is frozen: never regenerate it; a later schema gets a fixture of its own beside it.
"""

import shutil
from pathlib import Path

import pytest

from agent_run.home import Home
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


def test_the_frozen_plans_are_the_ones_written_then(old_home):
    plans = [
        r["plan_json"] for r in db_rows(old_home, "SELECT plan_json FROM executions ORDER BY id")
    ]
    assert len(plans) == 2 and all(
        '"runtime": "demo"' in p and '"worker_tools": ["finish"]' in p for p in plans
    )
