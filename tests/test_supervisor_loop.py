"""The supervisor's loop while its engine is silent: it sleeps until its next command poll, and
a poll skips its query when no other connection committed (store/db.py `ChangeWatch`)."""

import time
from pathlib import Path

from agent_run.domain.states import ExecutionState
from agent_run.store.db import ChangeWatch, connect, write
from agent_run.supervisor.eventlog import FLUSH_INTERVAL_SECONDS, ExecutionLog
from tests.harness import db_rows, wait_for


def test_change_watch_sees_another_connections_commit_and_not_its_own(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    ours, theirs = connect(db), connect(db)
    try:
        watch = ChangeWatch(ours)
        assert watch.unchanged("commands") is False  # the first poll always reads
        assert watch.unchanged("commands") is True
        assert watch.unchanged("group") is False  # each poll keeps its own version
        with write(ours):  # our own commit: nothing new for our polls to read
            ours.execute("CREATE TABLE ours_only (x)")
        assert watch.unchanged("commands") is True
        with write(theirs):
            theirs.execute("CREATE TABLE theirs (x)")
        assert watch.unchanged("commands") is False
        assert watch.unchanged("commands") is True
        assert watch.unchanged("group") is False  # it had not read since their commit
    finally:
        ours.close()
        theirs.close()


def test_event_log_says_when_its_held_events_are_due(tmp_path: Path) -> None:
    conn = connect(tmp_path / "state.db")
    try:
        log = ExecutionLog(
            conn, "ag_x", "ex_x", "demo", account=None, raw_path=tmp_path / "raw.jsonl"
        )
        log.flush()
        assert log.due_in() is None  # nothing held: no reason to wake
        log.raw(b'{"type": "x"}\n')
        due_in = log.due_in()
        assert due_in is not None and 0 < due_in <= FLUSH_INTERVAL_SECONDS
        assert not log.due()
        wait_for(log.due, timeout=10, interval=0.01, what="the held line to fall due")
        assert log.due_in() <= 0
        log.flush()
        assert log.due_in() is None
    finally:
        conn.close()


def _voluntary_switches(pid: int) -> int:
    """How often the process's main thread has slept (woken once per pass of its loop)."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if "voluntary_ctxt" in line))


def test_a_silent_agents_supervisor_sleeps_until_its_next_command_poll(daemon, home, workdir):
    """With nothing from its engine and nothing to flush, a pass every command poll (0.2 s):
    at most ~10 in 2 s, where a fixed 50 ms tick made ~40. A cancel is still seen at once."""
    agent = daemon.call("start", {"task": "sleep: 60", "workdir": str(workdir)})
    query = "SELECT supervisor_pid FROM executions WHERE agent_id = ? AND state = ?"

    def running() -> int | None:
        rows = db_rows(home, query, (agent["id"], ExecutionState.RUNNING))
        return rows[0]["supervisor_pid"] if rows else None

    pid = wait_for(running, timeout=60, what="the agent running")
    events = "SELECT count(*) AS n FROM events WHERE agent_id = ? AND kind = 'session'"
    wait_for(
        lambda: db_rows(home, events, (agent["id"],))[0]["n"] == 1,
        timeout=30,
        what="the engine's session event stored (then it is silent)",
    )
    before, started = _voluntary_switches(pid), time.monotonic()
    wait_for(lambda: time.monotonic() - started >= 2.0, timeout=10, what="a 2 s window")
    passes = _voluntary_switches(pid) - before
    assert passes <= 20, f"{passes} passes of the supervisor's loop in 2 s of silence"
    daemon.call("cancel", {"agent_id": agent["id"]})
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 30})
    assert result["agent"]["state"] == "cancelled"
