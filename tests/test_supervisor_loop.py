"""The supervisor's loop while its engine is silent: it sleeps until its next command poll, and
a poll skips its query when no other connection committed (store/db.py `ChangeWatch`)."""

import subprocess
import sys
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
        held_at = time.monotonic()
        log.raw(b'{"type": "x"}\n')
        due_in = log.due_in()
        assert due_in is not None and due_in <= FLUSH_INTERVAL_SECONDS
        # Due one interval after it was held: a loaded machine may have let that pass already.
        if time.monotonic() - held_at < FLUSH_INTERVAL_SECONDS:
            assert due_in > -0.001
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


def test_event_log_flush_soon_makes_what_is_held_due_at_the_next_check(tmp_path: Path) -> None:
    conn = connect(tmp_path / "state.db")
    try:
        log = ExecutionLog(conn, "ag_x", "ex_x", "demo", account=None)
        log.flush()
        log.event("session", {"session_id": "s"})
        assert not log.due()  # held for the flush interval, to be written with what follows
        log.flush_soon()
        log.event("message", {"role": "assistant"})  # what the same read brings joins it
        assert log.due() and log.due_in() <= 0
        log.flush()
        assert log.due_in() is None
        log.event("later", {})
        assert not log.due()  # a flush ends the request
    finally:
        conn.close()


def test_a_supervisor_commits_its_token_with_its_identity_and_its_session_with_its_read(
    home, workdir
):
    """Each commit costs the supervisor a write transaction and the daemon a nudge to read: up
    to its engine's first (silent) wait, a demo agent's supervisor commits three times: its
    identity (with the worker token's hash, before any engine can hold the token), `running`
    with the engine's pid, and the read that brought the engine's session. The nudges are
    counted on the wake socket, standing in for the daemon's."""
    from agent_run.store import wake
    from tests.test_admission import admit_without_spawning

    agent_id, execution_id = admit_without_spawning(home, "sleep: 60", workdir)
    nudges = wake.listen(home.wake_path)
    assert nudges is not None
    argv = [sys.executable, "-m", "agent_run.supervisor", "--home", str(home.root)]
    supervisor = subprocess.Popen(
        [*argv, "--execution", execution_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    try:
        supervisor.stdin.write(b'{"secrets": {}}\n')
        supervisor.stdin.close()
        session = "SELECT count(*) AS n FROM events WHERE execution_id = ? AND kind = 'session'"
        wait_for(
            lambda: db_rows(home, session, (execution_id,))[0]["n"] == 1,
            timeout=60,
            what="the engine's session event stored (then it is silent)",
        )
        # The nudge follows its commit in the same thread, before the loop sleeps again: two
        # more sleeps of the main thread and every nudge so far has been sent.
        seen = _voluntary_switches(supervisor.pid)
        wait_for(
            lambda: _voluntary_switches(supervisor.pid) >= seen + 2,
            timeout=30,
            what="the supervisor's loop sleeping again",
        )
        assert wake.drain(nudges) == 3
        row = db_rows(
            home,
            "SELECT state, worker_token_sha256 FROM executions WHERE id = ?",
            (execution_id,),
        )[0]
        assert row["state"] == "running" and len(row["worker_token_sha256"]) == 64
    finally:
        supervisor.terminate()  # it stops its engine and records the end
        supervisor.wait(timeout=60)
        nudges.close()
    state = db_rows(home, "SELECT state FROM executions WHERE id = ?", (execution_id,))[0]
    assert state["state"] == "cancelled", (agent_id, state["state"])
