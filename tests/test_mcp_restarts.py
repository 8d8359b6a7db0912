"""MCP calls cut by the daemon's end while they are in flight (kill -9, `api restart`): a
read-only call (`wait`) is sent again to the next daemon (one the MCP server starts, or the
restart's) and returns the verified answer; any other call is answered "outcome unknown" with
how to check, never "nothing was executed"."""

import os
import signal
from typing import Any

import anyio
import pytest

from agent_run.mcp.server import error_data
from agent_run.rpc.autostart import lock_holder
from agent_run.system.home import Home
from tests.harness import DaemonProcess, cli_json, db_rows, wait_for, wait_for_async
from tests.mcp_harness import mcp_session

pytestmark = pytest.mark.anyio

# A demo agent that steps until the test lets it end (a flag file), however slow the machine.
LONG_TASK = "steps: 1000000\nstep_seconds: 0.1\nuntil: go.flag\nanswer: {answer}"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _events(home: Home, agent_id: str) -> int:
    return db_rows(home, "SELECT COUNT(*) AS n FROM events WHERE agent_id = ?", (agent_id,))[0]["n"]


def _stop_other_daemon(home: Home, old_pid: int) -> None:
    """SIGTERM the daemon the MCP server started (the fixture's was killed)."""
    holder = lock_holder(home)
    if holder is not None and holder.isdigit() and int(holder) != old_pid:
        os.kill(int(holder), signal.SIGTERM)
        wait_for(lambda: lock_holder(home) is None, what="the started daemon to stop")


async def _wait_across(home: Home, agent_id: str, workdir, restart: Any) -> Any:
    """An MCP `wait` on the agent; once a slice of it is parked in the daemon, `restart()`
    (which returns the new daemon's pid); then the agent may end. The wait's result."""
    sliced = anyio.Event()

    async def on_progress(_value: float, _total: float | None, _message: str | None) -> None:
        sliced.set()  # one slice answered: the next is in flight

    waited: dict[str, Any] = {}
    async with mcp_session(home) as session:

        async def waiting() -> None:
            params = {"agent_id": agent_id, "timeout_seconds": 600}
            waited["result"] = await session.call_tool(
                "wait", params, progress_callback=on_progress
            )

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(waiting)
            with anyio.fail_after(120):
                await sliced.wait()
            # The next slice went out as the progress came; a few steps later it is parked in
            # the daemon (the restart lands mid-call, not between two calls).
            steps = _events(home, agent_id)
            await wait_for_async(lambda: _events(home, agent_id) >= steps + 3)
            await restart()
            assert not waited, waited["result"].content  # it did not end with its daemon
            (workdir / "go.flag").touch()
        answer = await session.call_tool("answer", {"agent_id": agent_id})
    return waited["result"], answer


async def test_a_wait_outlives_a_kill_9_of_its_daemon_and_returns_the_verified_answer(
    daemon: DaemonProcess, workdir
) -> None:
    home, old_pid = daemon.home, daemon.proc.pid
    task = LONG_TASK.format(answer="outlived its daemon")
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})

    async def kill_9() -> None:
        daemon.kill9()
        await wait_for_async(
            lambda: lock_holder(home) not in (None, str(old_pid)),
            timeout=180,
            what="the MCP server to start a daemon for the cut wait",
        )

    try:
        result, answer = await _wait_across(home, agent["id"], workdir, kill_9)
        assert not result.is_error, result.content
        assert result.structured_content["timed_out"] is False
        assert result.structured_content["agent"]["state"] == "succeeded"
        assert answer.structured_content["text"] == "outlived its daemon"
        assert answer.structured_content["verified"] is True
    finally:
        _stop_other_daemon(home, old_pid)


async def test_a_wait_outlives_an_api_restart(daemon: DaemonProcess, workdir) -> None:
    home, old_pid = daemon.home, daemon.proc.pid
    task = LONG_TASK.format(answer="outlived a restart")
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    restarted: dict[str, Any] = {}

    async def api_restart() -> None:
        restarted.update(await anyio.to_thread.run_sync(cli_json, home, "api", "restart"))

    try:
        result, answer = await _wait_across(home, agent["id"], workdir, api_restart)
        assert restarted["stopped"]["pid"] == old_pid and restarted["pid"] != old_pid
        assert not result.is_error, result.content
        assert result.structured_content["agent"]["state"] == "succeeded"
        assert answer.structured_content["text"] == "outlived a restart"
    finally:
        _stop_other_daemon(home, old_pid)


async def test_a_steer_cut_by_a_kill_9_is_outcome_unknown_and_it_did_take_effect(
    daemon: DaemonProcess, workdir
) -> None:
    home = daemon.home
    agent = daemon.call(
        "start", {"task": LONG_TASK.format(answer="first"), "workdir": str(workdir)}
    )
    query = "SELECT * FROM executions WHERE agent_id = ? AND engine_pid IS NOT NULL"
    row = wait_for(lambda: next(iter(db_rows(home, query, (agent["id"],))), None))
    # Its supervisor does not read the steer: the daemon enqueues it and waits for the verdict.
    os.kill(row["supervisor_pid"], signal.SIGSTOP)
    steered: dict[str, Any] = {}
    try:
        async with mcp_session(home) as session:

            async def steering() -> None:
                params = {"agent_id": agent["id"], "text": "answer: steered"}
                steered["result"] = await session.call_tool("steer", params)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(steering)
                await wait_for_async(
                    lambda: db_rows(home, "SELECT id FROM commands WHERE kind = 'steer'"),
                    what="the daemon to enqueue the steer",
                )
                daemon.kill9()  # while it waits for the supervisor's verdict
        result = steered["result"]
        assert result.is_error
        text = result.content[0].text
        assert "the outcome is unknown (it may have acted)" in text, text
        assert "Check with `agent` or `transcript`" in text and "Nothing was executed" not in text
        assert error_data(result)["details"] == {"outcome": "unknown"}
    finally:
        os.kill(row["supervisor_pid"], signal.SIGCONT)
    # It had acted: the supervisor takes the steer the killed daemon enqueued.
    again = DaemonProcess(home).start()
    try:
        wait_for(
            lambda: (
                db_rows(home, "SELECT state FROM commands WHERE kind = 'steer'")[0]["state"]
                == "delivered"
            ),
            what="the steer to be delivered",
        )
        (workdir / "go.flag").touch()
        with again.client(timeout=150) as client:
            done = client.call("wait", {"agent_id": agent["id"], "timeout_seconds": 120})
        assert done["agent"]["state"] == "succeeded", done
        assert again.call("answer", {"agent_id": agent["id"]})["text"] == "steered"
    finally:
        again.stop()
