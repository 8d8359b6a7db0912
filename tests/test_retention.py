"""Retention (`prune`, `[retention]`): real demo agents whose end is moved back in time in the
store; a dry run lists, a real run frees the bytes; running agents, a live batch's agents and
worktrees are never touched; sealed answers stay unless prune_answers; the daemon prunes on its
own schedule."""

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agent_run.system.home import Home
from tests.batch_harness import runs_of, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, cli, cli_json, db_rows, wait_for

DAY = 86_400


def run_demo(daemon: DaemonProcess, task: str, workdir: Path) -> dict[str, Any]:
    agent = daemon.call("start", {"task": task, "workdir": str(workdir), "runtime": "demo"})
    return daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]


def age(home: Home, agent_id: str, days: float) -> None:
    """Move the agent's end (and last update) `days` back, as if it had ended then."""
    with sqlite3.connect(home.db_path) as conn:
        conn.execute(
            "UPDATE executions SET ended_at = coalesce(ended_at, updated_at) - ?,"
            " updated_at = updated_at - ? WHERE agent_id = ?",
            (days * DAY, days * DAY, agent_id),
        )


def rows_of(home: Home, agent_id: str) -> dict[str, int]:
    tables = ("agents", "executions", "events", "messages")
    return {
        t: db_rows(
            home,
            f"SELECT count(*) AS n FROM {t} WHERE {'id' if t == 'agents' else 'agent_id'} = ?",
            (agent_id,),
        )[0]["n"]
        for t in tables
    }


def set_retention(home: Home, block: str) -> None:
    (home.root / "config.toml").write_text(TEST_CONFIG + "[retention]\n" + block)


def test_dry_run_lists_then_prune_frees_the_bytes_and_keeps_sealed_answers(daemon, workdir):
    home = daemon.home
    done = run_demo(daemon, "steps: 3\nanswer: kept", workdir)
    failed = run_demo(daemon, "steps: 2\nfail: crash", workdir)
    recent = run_demo(daemon, "answer: recent", workdir)
    assert (done["state"], failed["state"], recent["state"]) == ("succeeded", "failed", "succeeded")
    for agent in (done, failed):
        age(home, agent["id"], 40)
    answer_before = daemon.call("answer", {"agent_id": done["id"]})
    engine_home = home.homes_dir / "demo" / failed["id"]
    assert engine_home.is_dir() and (home.agents_dir / failed["id"]).is_dir()

    preview = cli_json(home, "prune", "--dry-run")
    assert preview["dry_run"] is True
    by_id = {a["agent_id"]: a for a in preview["agents"]}
    assert set(by_id) == {done["id"], failed["id"]}  # not the recent one
    assert by_id[failed["id"]]["action"] == "removed"
    assert by_id[done["id"]]["action"] == "activity_removed"
    assert str(home.agents_dir / failed["id"]) in by_id[failed["id"]]["paths"]
    assert str(engine_home) in by_id[failed["id"]]["paths"]
    assert all("answer.md" not in p for p in by_id[done["id"]]["paths"])
    assert preview["bytes_freed"] == sum(a["bytes"] for a in preview["agents"]) > 0
    # the preview removed nothing
    assert engine_home.is_dir() and rows_of(home, failed["id"])["events"] > 0
    text = cli(home, "prune", "--dry-run", "--format", "text").stdout
    assert f"{preview['bytes_freed']:,} bytes" in text and "without --dry-run" in text

    pruned = cli_json(home, "prune")
    assert pruned["dry_run"] is False
    assert pruned["bytes_freed"] == preview["bytes_freed"]
    assert pruned["rows_deleted"] == preview["rows_deleted"] > 0
    assert not (home.agents_dir / failed["id"]).exists() and not engine_home.exists()
    assert rows_of(home, failed["id"]) == {"agents": 0, "executions": 0, "events": 0, "messages": 0}
    # the sealed answer stays, still verified; its events, messages and logs are gone
    assert rows_of(home, done["id"]) == {"agents": 1, "executions": 1, "events": 0, "messages": 0}
    answer = daemon.call("answer", {"agent_id": done["id"]})
    assert (answer["text"], answer["sha256"]) == (answer_before["text"], answer_before["sha256"])
    folder = Path(answer["path"]).parent
    assert sorted(p.name for p in folder.iterdir()) == ["answer.json", "answer.md"]
    assert not (home.homes_dir / "demo" / done["id"]).exists()
    # the recent agent is whole, and a second pass finds nothing left to do
    assert rows_of(home, recent["id"])["events"] > 0
    assert cli_json(home, "prune")["agents"] == []


def test_prune_answers_removes_sealed_answers_too(daemon, workdir):
    home = daemon.home
    done = run_demo(daemon, "answer: goes", workdir)
    age(home, done["id"], 31)
    set_retention(home, "prune_answers = true\n")
    revision = daemon.call("list_agents", {})["revision"]
    pruned = daemon.call("prune", {})
    assert [(a["agent_id"], a["action"]) for a in pruned["agents"]] == [(done["id"], "removed")]
    assert not (home.agents_dir / done["id"]).exists()
    assert rows_of(home, done["id"])["agents"] == 0
    # its events were the newest: the revision a long-poll waits past never moves back
    assert db_rows(home, "SELECT count(*) AS n FROM events")[0]["n"] == 0
    assert daemon.call("list_agents", {})["revision"] == revision


def test_engine_homes_go_first(daemon, workdir):
    home = daemon.home
    done = run_demo(daemon, "answer: home goes", workdir)
    age(home, done["id"], 8)  # past engine_home_days (7), not agent_days (30)
    pruned = daemon.call("prune", {})
    assert [(a["agent_id"], a["action"], a["rows"]) for a in pruned["agents"]] == [
        (done["id"], "engine_home", 0)
    ]
    assert not (home.homes_dir / "demo" / done["id"]).exists()
    assert rows_of(home, done["id"])["events"] > 0
    assert daemon.call("answer", {"agent_id": done["id"]})["text"] == "home goes"


def test_a_running_agent_and_a_live_batchs_agents_are_untouched(batch_project, workdir):
    daemon = batch_project.daemon
    home = daemon.home
    running = daemon.call(
        "start",
        {"task": "steps: 600\nstep_seconds: 0.2", "workdir": str(workdir), "runtime": "demo"},
    )
    wait_for(lambda: daemon.call("agent", {"agent_id": running["id"]})["state"] == "running")
    # a ranked batch whose candidate fails blocks: the batch is live (a rerun may follow)
    batch = batch_project.start_ranked_pair(prompt="require: go.flag\nanswer: no")
    blocked = wait_batch(daemon, batch["id"], states=("blocked",))
    candidate = runs_of(blocked, "candidate")[0]
    assert candidate["state"] == "failed"
    for agent_id in (running["id"], candidate["agent_id"]):
        age(home, agent_id, 400)
    pruned = daemon.call("prune", {})
    assert pruned["agents"] == []
    assert rows_of(home, candidate["agent_id"])["agents"] == 1
    assert (home.homes_dir / "demo" / candidate["agent_id"]).is_dir()
    assert Path(candidate["worktree"]).is_dir()
    assert daemon.call("agent", {"agent_id": running["id"]})["state"] == "running"
    daemon.call("cancel", {"agent_id": running["id"]})
    # once the batch has ended, its agent's activity may go; its row stays for the batch's views
    daemon.call("batch_cancel", {"batch_id": batch["id"]})
    wait_batch(daemon, batch["id"], states=("cancelled",))
    pruned = daemon.call("prune", {})
    assert (candidate["agent_id"], "activity_removed") in [
        (a["agent_id"], a["action"]) for a in pruned["agents"]
    ]
    assert rows_of(home, candidate["agent_id"])["agents"] == 1
    assert Path(candidate["worktree"]).is_dir()  # never a worktree
    assert daemon.call("batch", {"batch_id": batch["id"]})["state"] == "cancelled"


def test_the_daemon_prunes_on_its_own_schedule(home, workdir):
    set_retention(home, "interval_seconds = 1\n")
    daemon = DaemonProcess(home).start()
    try:
        failed = run_demo(daemon, "fail: crash", workdir)
        age(home, failed["id"], 31)
        wait_for(lambda: rows_of(home, failed["id"])["agents"] == 0, timeout=60, what="pruned")
        # the files go after the rows' transaction, then the pass that pruned it is logged
        # (every pass logs `retention.pruned`, most with nothing pruned)
        log = home.logs_dir / "daemon.log"

        def pruning_logged() -> bool:
            lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
            return any(
                line.get("event") == "retention.pruned" and line.get("agents") == 1
                for line in lines
            )

        wait_for(pruning_logged, timeout=60, what="the pass that pruned it, logged")
        assert not (home.agents_dir / failed["id"]).exists()
    finally:
        daemon.stop()


@pytest.mark.anyio
async def test_prune_over_mcp_previews_like_the_socket(daemon, workdir):
    from tests.mcp_harness import mcp_session

    home = daemon.home
    failed = run_demo(daemon, "fail: crash", workdir)
    age(home, failed["id"], 31)
    async with mcp_session(home) as session:
        result = await session.call_tool("prune", {"dry_run": True})
    assert not result.is_error
    preview = result.structured_content
    assert [a["agent_id"] for a in preview["agents"]] == [failed["id"]]
    assert preview == daemon.call("prune", {"dry_run": True})
    assert rows_of(home, failed["id"])["agents"] == 1  # a preview removes nothing


@pytest.fixture
def anyio_backend():
    return "asyncio"


def test_notices_and_notify_targets_are_pruned_with_their_agents(daemon, workdir):
    """An agent's notify target and its notices go when retention removes its rows, whole or
    only its activity (a sealed answer kept): counted in the preview, and never re-announced."""
    import json

    home = daemon.home
    log = workdir.parent / f"{workdir.name}-pruned-notices.log"
    notify = {"transport": "command", "argv": ["/usr/bin/tee", "-a", str(log)]}
    agents = {}
    for name, task in (
        ("kept", "answer: kept"),
        ("removed", "fail: crash"),
        ("recent", "answer: r"),
    ):
        agent = daemon.call("start", {"task": task, "workdir": str(workdir), "notify": notify})
        daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
        agents[name] = agent["id"]
    for agent_id in agents.values():
        wait_for(
            lambda a=agent_id: (
                daemon.call("delivery_status", {"agent_id": a})["state"] == "delivered"
            ),
            what="its notice delivered",
        )
    for name in ("kept", "removed"):
        age(home, agents[name], 40)
    owned = (
        "SELECT (SELECT count(*) FROM notify_targets WHERE agent_id = ?)"
        " + (SELECT count(*) FROM notices n JOIN notify_targets t ON t.id = n.target_id"
        " WHERE t.agent_id = ?) AS n"
    )
    before = {name: db_rows(home, owned, (a, a))[0]["n"] for name, a in agents.items()}
    assert before == {"kept": 2, "removed": 2, "recent": 2}
    preview = daemon.call("prune", {"dry_run": True})
    pruned = daemon.call("prune", {})
    assert pruned["rows_deleted"] == preview["rows_deleted"]
    by_id = {a["agent_id"]: a for a in pruned["agents"]}
    assert by_id[agents["kept"]]["action"] == "activity_removed"
    assert by_id[agents["removed"]]["action"] == "removed"
    after = {name: db_rows(home, owned, (a, a))[0]["n"] for name, a in agents.items()}
    assert after == {"kept": 0, "removed": 0, "recent": 2}
    daemon.wait_notice_passes(3)  # three passes later, nothing was announced again
    sent = [json.loads(line)["agent_id"] for line in log.read_text().splitlines()]
    assert sorted(sent) == sorted(agents.values())
    assert db_rows(home, "SELECT count(*) AS n FROM notices")[0]["n"] == 1
    assert daemon.call("delivery_status", {"agent_id": agents["kept"]})["transport"] is None
    log.unlink()
