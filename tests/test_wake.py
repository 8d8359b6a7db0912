"""Nudges: a supervisor's commit wakes the daemon's revision watcher at once (store/wake.py),
so a `wait` returns without waiting out a poll; a lost nudge costs only that poll."""

import asyncio
import socket

import pytest

from agent_run.services.context import RevisionWatcher
from agent_run.store import wake
from agent_run.store.db import connect, on_commit, write
from tests.harness import short_tmpdir, wait_for


def test_a_nudge_wakes_a_waiter_the_poll_would_not_have():
    revision, reads = 0, 0

    async def read() -> int:
        nonlocal reads
        reads += 1
        return revision

    async def scenario() -> tuple[bool, bool]:
        nonlocal revision
        watcher = RevisionWatcher(read, poll_seconds=3600)  # only a nudge reads again
        task = asyncio.create_task(watcher.run())
        waiting = asyncio.create_task(watcher.wait_past(0, timeout=30))
        for _ in range(10_000):  # it reads at start and for its first waiter, then pauses
            if reads == 2:
                break
            await asyncio.sleep(0.001)
        revision = 1
        unnudged = await watcher.wait_past(0, timeout=0.3)
        watcher.nudge()
        nudged = await waiting
        task.cancel()
        return unnudged, nudged

    assert asyncio.run(scenario()) == (False, True)


def test_a_store_connection_nudges_after_each_commit_and_not_after_a_rollback(tmp_path):
    conn = connect(tmp_path / "state.db")
    commits = []
    on_commit(conn, lambda: commits.append(1))
    with write(conn):
        conn.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(RuntimeError):
        with write(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            raise RuntimeError("rolled back")
    assert commits == [1]
    conn.close()


def test_a_waker_reaches_a_listener_and_never_raises_without_one():
    folder = short_tmpdir("wk-")
    path = folder / "wake.sock"
    lonely = wake.Waker(path)
    lonely.wake()  # nobody listens: silently nothing
    sock = wake.listen(path)
    assert sock is not None and (path.stat().st_mode & 0o777) == 0o600
    lonely.wake()
    lonely.wake()
    wait_for(lambda: _pending(sock), timeout=10, what="the nudges")
    assert wake.drain(sock) == 2 and wake.drain(sock) == 0
    lonely.close()
    sock.close()


def _pending(sock: socket.socket) -> bool:
    try:
        sock.recv(16, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    return True


def test_a_supervisor_nudges_the_daemon_as_its_agent_runs(daemon, home, workdir):
    """The daemon's socket is moved aside (it keeps listening there) and ours takes its path:
    what the agent's supervisor sends arrives here."""
    aside = home.root / "wake-daemon.sock"
    home.wake_path.rename(aside)
    ours = wake.listen(home.wake_path)
    assert ours is not None
    agent = daemon.call(
        "start", {"task": "steps: 2\nstep_seconds: 0.05\nanswer: x", "workdir": str(workdir)}
    )
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    assert result["agent"]["state"] == "succeeded"
    assert wake.drain(ours) >= 3  # running, the steps, the end: one per commit
    ours.close()
