"""Nudges: a supervisor's commit wakes the daemon's revision watcher at once (store/wake.py),
so a `wait` returns without waiting out a poll; a lost nudge costs only that poll."""

import asyncio
import socket

import pytest

from agent_run.config.model import load_config
from agent_run.services.context import RevisionWatcher, ServiceContext
from agent_run.store import wake
from agent_run.store.db import connect, on_commit, write
from agent_run.store.events import append_event, revision_and_state_changes
from agent_run.supervisor.refuse import refuse_plan
from tests.harness import db_rows, short_tmpdir, wait_for
from tests.test_admission import admit_without_spawning


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


async def _until(condition, what: str) -> None:
    """Let the loop run until `condition()` holds, for at most 10 s."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never: {what}")


async def _turns(n: int = 50) -> None:
    """Let every ready task run on: a woken waiter returns within a few turns of the loop."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_wait_on_one_agents_state_sleeps_through_other_moves_and_wakes_on_its_own():
    """`wait_past(state_of=A)` is woken by a move that changed A's state, or by one too large to
    list (None), and by nothing else: not by B's state, not by a move it has already seen."""
    script = [(5, ["B"]), (6, []), (8, ["A", "B"]), (9, None), (12, ["A"])]
    reads = 0

    async def revision() -> int:
        raise AssertionError("a state waiter parks: every read lists the state changes")

    async def state_changes(after: int) -> tuple[int, list[str] | None]:
        nonlocal reads
        reads += 1
        return script[min(reads, len(script)) - 1]

    async def move(watcher: RevisionWatcher) -> None:
        """One more read (its wakes are done by the time `reads` counts it)."""
        before = reads
        watcher.nudge()
        await _until(lambda: reads > before, "the watcher's read")
        await _turns()

    async def scenario() -> None:
        watcher = RevisionWatcher(revision, poll_seconds=3600, read_state_changes=state_changes)
        first = asyncio.create_task(watcher.wait_past(0, timeout=30, state_of="A"))
        await _until(lambda: watcher.parked == 1, "the first waiter parked")
        task = asyncio.create_task(watcher.run())
        await _until(lambda: reads == 1, "the watcher's first read")
        await _turns()
        assert (watcher.revision, first.done()) == (5, False)  # B's state
        await move(watcher)
        assert (watcher.revision, first.done()) == (6, False)  # messages only
        await move(watcher)
        assert watcher.revision == 8 and first.done()  # A's state: woken
        again = asyncio.create_task(watcher.wait_past(8, timeout=30, state_of="A"))
        # parked from revision 10, read from the store ahead of the watcher
        ahead = asyncio.create_task(watcher.wait_past(10, timeout=30, state_of="A"))
        await _until(lambda: watcher.parked == 2, "both waiters parked")
        await move(watcher)
        # too many to list: woken; the move to 9 is one `ahead` has seen
        assert (watcher.revision, again.done(), ahead.done()) == (9, True, False)
        await move(watcher)
        assert (watcher.revision, ahead.done()) == (12, True)  # A's state past 10
        task.cancel()

    asyncio.run(scenario())


def test_the_state_changes_of_a_range_name_only_agents_with_a_state_event(tmp_path):
    conn = connect(tmp_path / "state.db")
    with write(conn):
        append_event(conn, agent_id="a", execution_id="ea", kind="message", data={})
        append_event(conn, agent_id="b", execution_id="eb", kind="state", data={})
        append_event(conn, agent_id="c", execution_id="ec", kind="state", data={})
        append_event(conn, agent_id="b", execution_id="eb", kind="state", data={})
    revision, changed = revision_and_state_changes(conn, 0, limit=10)
    assert revision == 4 and sorted(changed or []) == ["b", "c"]
    assert sorted(revision_and_state_changes(conn, 2, limit=10)[1] or []) == ["b", "c"]
    assert revision_and_state_changes(conn, 3, limit=10) == (4, ["b"])
    assert revision_and_state_changes(conn, 4, limit=10) == (4, [])
    assert revision_and_state_changes(conn, 0, limit=1) == (4, None)  # too many to list
    conn.close()


def test_a_commit_on_a_daemon_database_thread_wakes_the_watcher_without_its_poll(home):
    """The daemon's own writes (a cancel's command, a reconcile's `lost`, a batch decision)
    nudge its watcher from the database thread that committed them."""
    connect(home.db_path).close()
    ctx = ServiceContext(home, load_config(home), threads=1)

    def commit(conn) -> None:
        with write(conn):
            append_event(conn, agent_id="a", execution_id="e", kind="message", data={})

    async def scenario() -> bool:
        ctx.watcher.poll_seconds = 3600  # only a nudge reads again
        task = asyncio.create_task(ctx.watcher.run())
        parked = asyncio.create_task(ctx.watcher.wait_past(0, timeout=60))
        # the watcher ran first (it was made first), so it has its loop to be nudged on
        await _until(lambda: ctx.watcher.parked == 1, "the waiter parked")
        await ctx.db(commit)
        woken = await parked
        task.cancel()
        return woken

    try:
        assert asyncio.run(scenario()) is True
    finally:
        ctx.shutdown()


def test_a_refused_plan_nudges_the_daemon(home, workdir):
    """A supervisor that refuses its plan ends the execution `failed` and says so at once."""
    _agent_id, execution_id = admit_without_spawning(home, "answer: x", workdir)
    listener = wake.listen(home.wake_path)
    assert listener is not None
    refuse_plan(home, execution_id, "the plan names no engine")
    rows = db_rows(home, "SELECT state FROM executions WHERE id = ?", (execution_id,))
    assert rows[0]["state"] == "failed"
    wait_for(lambda: _pending(listener), timeout=10, what="the refusal's nudge")
    listener.close()


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
