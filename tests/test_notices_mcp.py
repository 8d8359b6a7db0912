"""The `mcp_channel` notice transport, protocol side: `agent-run mcp` declares
`capabilities.experimental["claude/channel"]`, holds a subscription with the daemon and pushes
`notifications/claude/channel {content, meta}`; a session that is gone gets `expired`."""

from typing import Any

import pytest
from mcp.client.extension import NotificationBinding
from pydantic import BaseModel, ConfigDict

from tests.harness import DaemonProcess, db_rows, wait_for, wait_for_async
from tests.mcp_harness import mcp_session

pytestmark = pytest.mark.anyio
TASK_MARK = "mcp-task-text-never-pushed-3b7e"
ANSWER_MARK = "mcp-answer-text-never-pushed-c2a4"


@pytest.fixture
def anyio_backend():
    return "asyncio"


class ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any]


def recorder() -> tuple[list[ChannelParams], NotificationBinding[ChannelParams]]:
    received: list[ChannelParams] = []

    async def record(params: ChannelParams) -> None:
        received.append(params)

    return received, NotificationBinding(
        method="notifications/claude/channel", params_type=ChannelParams, handler=record
    )


async def test_channel_capability_and_a_pushed_notice(daemon, workdir):
    received, binding = recorder()
    async with mcp_session(daemon.home, notification_bindings=[binding]) as s:
        assert "claude/channel" in (s.server_capabilities.experimental or {})
        started = await s.call_tool(
            "start",
            {
                "task": f"# {TASK_MARK}\nanswer: {ANSWER_MARK}",
                "workdir": str(workdir),
                "notify": {"transport": "mcp_channel"},
            },
        )
        assert not started.is_error, started.content
        agent_id = started.structured_content["id"]
        await wait_for_async(lambda: received, what="the channel notification")
        pushed = received[0]
        assert pushed.meta["agent_id"] == agent_id and pushed.meta["state"] == "succeeded"
        assert pushed.meta["notice_id"].startswith("nt_")
        assert agent_id in pushed.content and pushed.meta["notice_id"] in pushed.content
        assert TASK_MARK not in pushed.content and ANSWER_MARK not in pushed.content

        def delivered():
            status = daemon.call("delivery_status", {"agent_id": agent_id})
            return status["state"] == "delivered" and status

        status = await wait_for_async(delivered, what="the push acknowledged")
        assert status["transport"] == "mcp_channel" and status["attempts"] == 1
    assert len(received) == 1


async def test_mcp_channel_outside_an_mcp_session_is_refused_naming_the_field(daemon, workdir):
    from agent_run.domain.errors import DomainError

    with pytest.raises(DomainError) as info:
        daemon.call(
            "start",
            {"task": "answer: x", "workdir": str(workdir), "notify": {"transport": "mcp_channel"}},
        )
    assert info.value.field == "notify.mcp_channel.session"


# An agent that runs for a minute unless cancelled: it ends when the test says, never earlier.
LONG = "steps: 600\nstep_seconds: 0.1\nanswer: later"


async def test_notices_of_a_session_that_is_gone_end_expired(daemon, workdir):
    async with mcp_session(daemon.home) as s:
        started = await s.call_tool(
            "start",
            {"task": LONG, "workdir": str(workdir), "notify": {"transport": "mcp_channel"}},
        )
        agent_id = started.structured_content["id"]
    # The MCP process has exited: what its session is owed can never be pushed.
    daemon.call("cancel", {"agent_id": agent_id})
    daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    seen: list[dict] = []

    def expired():
        seen.append(daemon.call("delivery_status", {"agent_id": agent_id}))
        return seen[-1]["state"] == "expired" and seen[-1]

    try:
        status = wait_for(expired, timeout=60, what="the notice to expire")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen[-1]}") from None
    assert status["last_error"] == "the MCP session that started the agent is gone"
    assert status["attempts"] == 0


def test_a_push_never_acknowledged_is_not_pushed_past_max_attempts(home, workdir):
    """A session that takes its notices but never acknowledges them (the socket-level side of
    the subscription, as a buggy `agent-run mcp` would): after `daemon.notice_unacked_seconds`
    the push counts as ambiguous, and with `max_attempts` pushes made the notice ends `failed`,
    not re-pushed."""
    config = (home.root / "config.toml").read_text()
    config = config.replace("[daemon]\n", "[daemon]\nnotice_unacked_seconds = 2.0\n", 1)
    (home.root / "config.toml").write_text(config)
    daemon = DaemonProcess(home).start()
    try:
        _never_acknowledged(daemon, workdir)
    finally:
        daemon.stop()


def _never_acknowledged(daemon, workdir) -> None:
    import time

    pushed_at = None
    session = "ms_" + "7" * 20
    agent = daemon.call(
        "start",
        {
            "task": "answer: x",
            "workdir": str(workdir),
            "notify": {"transport": "mcp_channel", "session": session, "max_attempts": 1},
        },
    )
    pushed: list[str] = []
    deadline = time.monotonic() + 90
    while True:
        batch = daemon.call("notice_channel", {"session": session, "wait_seconds": 2})
        pushed += [notice["id"] for notice in batch["notices"]]
        if pushed and pushed_at is None:
            pushed_at = time.monotonic()
        status = daemon.call("delivery_status", {"agent_id": agent["id"]})
        if status["state"] in ("failed", "delivered", "expired"):
            assert pushed_at is not None and time.monotonic() - pushed_at >= 1.5, status
            break
        assert len(pushed) <= 1, (pushed, status)  # never pushed a second time
        assert time.monotonic() < deadline, status
    assert status["state"] == "failed", status
    assert pushed == [status["notices"][0]["id"]]
    assert status["attempts"] == 1 and status["notices"][0]["ambiguous_sends"] == 1
    assert status["last_error"] == "pushed 1 time(s), never acknowledged"


def mcp_pid(home) -> int:
    """The `agent-run mcp` process serving this home (the session's stdio child)."""
    from agent_run.system.processes import current

    found = [
        pid
        for pid, argv in current().command_lines()
        if argv[-1:] == ["mcp"] and str(home.root) in argv
    ]
    assert len(found) == 1, found
    return found[0]


NO_AUTOSTART = {"AGENT_RUN_NO_AUTOSTART": "1"}  # a killed daemon is not restarted by the session


async def test_a_session_killed_without_closing_expires_once_it_stops_polling(daemon, workdir):
    """kill -9 of `agent-run mcp`: no `closing` reaches the daemon, so only the rule "gone after
    10 s without polling" can end what it was owed: `expired`, never pushed, not before 10 s."""
    import os
    import signal
    import time

    try:
        async with mcp_session(daemon.home, env=NO_AUTOSTART) as s:
            started = await s.call_tool(
                "start",
                {"task": LONG, "workdir": str(workdir), "notify": {"transport": "mcp_channel"}},
            )
            agent_id = started.structured_content["id"]
            os.kill(mcp_pid(daemon.home), signal.SIGKILL)
            killed_at = time.time()
    except Exception:  # the session's own streams break with its server: expected here
        pass
    daemon.call("cancel", {"agent_id": agent_id})  # it ends after its session is gone
    daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    status = wait_for(
        lambda: (
            (s := daemon.call("delivery_status", {"agent_id": agent_id}))["state"]
            in ("expired", "delivered", "failed")
            and s
        ),
        timeout=60,
        what="the notice of a killed session to expire",
    )
    assert status["state"] == "expired", status
    assert status["last_error"] == "the MCP session that started the agent is gone"
    # The poll the killed process left parked in the daemon may still take the notice (the
    # daemon sees the dead connection only when it answers): one attempt, never acknowledged.
    assert status["attempts"] <= 1
    [row] = db_rows(daemon.home, "SELECT updated_at FROM notices")
    assert row["updated_at"] - killed_at >= 9.5  # it waited for the session to stop polling


async def test_notices_wait_for_a_session_to_poll_a_restarted_daemon(daemon, workdir):
    """The daemon is killed while the agent runs; the new one makes the notice while the
    session cannot poll yet (stopped with SIGSTOP over several dispatcher passes): the boot
    grace keeps it owed, and once the session polls again it is pushed and acknowledged."""
    import os
    import signal

    received, binding = recorder()
    release = workdir / "release"  # the agent ends only once the test makes it (however slow)
    async with mcp_session(daemon.home, env=NO_AUTOSTART, notification_bindings=[binding]) as s:
        started = await s.call_tool(
            "start",
            {
                "task": "steps: 3000\nstep_seconds: 0.1\nuntil: release\nanswer: across a restart",
                "workdir": str(workdir),
                "notify": {"transport": "mcp_channel"},
            },
        )
        agent_id = started.structured_content["id"]
        session = mcp_pid(daemon.home)
        os.kill(session, signal.SIGSTOP)  # the agent still runs: nothing is owed to the session yet
        try:
            daemon.kill9()
            release.write_text("")
            ended = "SELECT state FROM executions WHERE agent_id = ?"
            wait_for(
                lambda: db_rows(daemon.home, ended, (agent_id,))[0]["state"] == "succeeded",
                timeout=60,
                what="the agent to end while the daemon is dead",
            )
            daemon.start()
            wait_for(
                lambda: db_rows(daemon.home, "SELECT state FROM notices"),
                what="the new daemon to make the notice",
            )
            daemon.wait_notice_passes(2)  # a whole pass (a sweep) begun after the notice was made
            assert db_rows(daemon.home, "SELECT state FROM notices")[0]["state"] == "pending"
        finally:
            os.kill(session, signal.SIGCONT)
        await wait_for_async(lambda: received, what="the push after the restart")
        assert received[0].meta["agent_id"] == agent_id

        def delivered():
            status = daemon.call("delivery_status", {"agent_id": agent_id})
            return status["state"] == "delivered" and status

        await wait_for_async(delivered, what="the push acknowledged to the new daemon")


async def test_batch_start_over_mcp_pushes_the_batch_and_its_runs(batch_project):
    received, binding = recorder()
    daemon = batch_project.daemon
    async with mcp_session(daemon.home, notification_bindings=[binding]) as s:
        started = await s.call_tool(
            "batch_start",
            {
                "runtime": "demo",
                "workflow": "repeated",
                "project": str(batch_project.repo),
                "runs": 2,
                "prompt": f"# {TASK_MARK}\nanswer: {ANSWER_MARK}",
                "notify": {"transport": "mcp_channel"},
                "notify_runs": True,
            },
        )
        assert not started.is_error, started.content
        batch_id = started.structured_content["id"]
        await wait_for_async(lambda: len(received) >= 3, what="the batch's and its runs' pushes")
        batch = daemon.call("batch", {"batch_id": batch_id})
        agents = {run["agent_id"] for run in batch["runs"]}
        assert {p.meta.get("agent_id") for p in received if "agent_id" in p.meta} == agents
        [pushed] = [p for p in received if "batch_id" in p.meta]
        assert (pushed.meta["batch_id"], pushed.meta["state"]) == (batch_id, "completed")
        assert all(TASK_MARK not in p.content and ANSWER_MARK not in p.content for p in received)

        def delivered():
            status = daemon.call("delivery_status", {"batch_id": batch_id})
            return status["state"] == "delivered" and status

        status = await wait_for_async(delivered, what="the batch's push acknowledged")
        assert status["transport"] == "mcp_channel" and len(status["notices"]) == 1
    assert len(received) == 3
