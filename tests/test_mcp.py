"""The MCP stdio server: every tool on the demo engine, progress, long-poll, errors, parity
(with the socket, the CLI and the web JSON API), a reply to every line, and calls cut by the
daemon's death (a read-only one outlives it; any other is "outcome unknown")."""

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from agent_run.cli.main import cli as cli_group
from agent_run.cli.main import command_for
from agent_run.cli.session import cli_words
from agent_run.mcp.server import error_data
from agent_run.tools.table import TOOLS
from tests.harness import wait_for, wait_for_async
from tests.mcp_harness import mcp_session

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_every_tool_works_over_mcp_on_the_demo_engine(daemon, workdir):
    async with mcp_session(daemon.home) as s:
        # The turn lasts until the steer is taken (a flag file), however slow the machine: a
        # steer read after the engine's last turn is refused, and the answer stays "over mcp".
        task = "steps: 1000000\nstep_seconds: 0.05\nuntil: go.flag\nanswer: over mcp"
        started = await s.call_tool("start", {"task": task, "workdir": str(workdir)})
        assert not started.is_error, started.content
        agent_id = started.structured_content["id"]
        assert "agent" in started.content[0].text or agent_id in started.content[0].text

        await wait_for_async(
            lambda: daemon.call("agent", {"agent_id": agent_id})["state"] == "running",
            what="the agent to run before its steer",
        )
        steer = await s.call_tool(
            "steer", {"agent_id": agent_id, "text": "answer: steered over mcp"}
        )
        # delivered, or not read yet by a supervisor slow to poll (it is, below)
        assert steer.structured_content["state"] in ("delivered", "pending"), steer
        command = steer.structured_content["command_id"]
        await wait_for_async(
            lambda: _command_state(daemon, agent_id, command) == "delivered",
            what="the steer to be delivered",
        )
        (workdir / "go.flag").touch()
        view = await s.call_tool("agent", {"agent_id": agent_id})
        assert view.structured_content["id"] == agent_id
        listed = await s.call_tool("list_agents", {})
        assert listed.structured_content["total"] == 1
        waited = await s.call_tool("wait", {"agent_id": agent_id, "timeout_seconds": 60})
        assert waited.structured_content["timed_out"] is False
        assert waited.structured_content["agent"]["state"] == "succeeded"
        answer = await s.call_tool("answer", {"agent_id": agent_id})
        assert answer.structured_content["text"] == "steered over mcp"
        transcript = await s.call_tool("transcript", {"agent_id": agent_id})
        assert transcript.structured_content["finished"] is True
        cancel = await s.call_tool("cancel", {"agent_id": agent_id})
        assert cancel.structured_content["accepted"] is False
        doc = await s.call_tool("doc", {"topic": "failures"})
        assert "rate_limited" in doc.structured_content["text"]


def _command_state(daemon, agent_id: str, command_id: int) -> str | None:
    """The state of command `command_id` as its last `command` event says."""
    page = daemon.call("events", {"agent_id": agent_id, "kinds": ["command"]})
    states = [e["data"]["state"] for e in page["items"] if e["data"].get("id") == command_id]
    return states[-1] if states else None


async def test_cancel_over_mcp_ends_the_agent_cancelled(daemon, workdir):
    async with mcp_session(daemon.home) as s:
        started = await s.call_tool(
            "start", {"task": "steps: 500\nstep_seconds: 0.05", "workdir": str(workdir)}
        )
        agent_id = started.structured_content["id"]
        cancel = await s.call_tool("cancel", {"agent_id": agent_id})
        assert cancel.structured_content["accepted"] is True
        waited = await s.call_tool("wait", {"agent_id": agent_id, "timeout_seconds": 30})
        assert waited.structured_content["agent"]["state"] == "cancelled"


async def test_wait_sends_progress_and_short_timeout_returns_timed_out(daemon, workdir):
    progress = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async with mcp_session(daemon.home) as s:
        started = await s.call_tool(
            "start",
            {"task": "steps: 200\nstep_seconds: 0.05\nanswer: late", "workdir": str(workdir)},
        )
        agent_id = started.structured_content["id"]
        waited = await s.call_tool(
            "wait", {"agent_id": agent_id, "timeout_seconds": 4.5}, progress_callback=on_progress
        )
        assert waited.is_error is False
        assert waited.structured_content["timed_out"] is True
        assert waited.structured_content["agent"]["state"] == "running"
        assert progress, "wait must send progress notifications while it waits"
        value, total, message = progress[-1]
        assert total == 4.5 and 0 < value <= 4.5
        assert "running" in message and "events" in message
        assert [p[0] for p in progress] == sorted(p[0] for p in progress)


async def test_long_poll_on_list_agents_wakes_soon_after_a_change(daemon, workdir):
    async with mcp_session(daemon.home) as s:
        first = await s.call_tool("list_agents", {})
        revision = first.structured_content["revision"]
        quiet = await s.call_tool("list_agents", {"after_revision": revision, "wait_seconds": 0.3})
        assert (
            quiet.structured_content["total"] == 0
            and quiet.structured_content["revision"] == revision
        )

        import anyio

        woke = {}

        async def poll():
            begun = time.monotonic()
            result = await s.call_tool(
                "list_agents", {"after_revision": revision, "wait_seconds": 30}
            )
            woke["after"] = time.monotonic() - begun
            woke["result"] = result.structured_content

        async with anyio.create_task_group() as tg:
            begun_at = time.monotonic()
            tg.start_soon(poll)
            await anyio.to_thread.run_sync(
                lambda: wait_for(
                    lambda: daemon.call("ping")["parked"] == 1, what="the long-poll to park"
                )
            )
            changed_at = time.monotonic()
            parked_after = changed_at - begun_at
            daemon.call("start", {"task": "answer: wake up", "workdir": str(workdir)})
            start_returned = time.monotonic() - changed_at
        assert woke["result"]["total"] == 1
        assert woke["result"]["revision"] > revision
        # Generous: the real figure (tens of ms) is measured in bench/bench_longpoll.py.
        assert woke["after"] < parked_after + start_returned + 2.0


async def test_invalid_arguments_name_the_field(daemon, workdir):
    async with mcp_session(daemon.home) as s:
        bad = await s.call_tool("start", {"task": "x", "workdir": str(workdir), "profile": "root"})
        assert bad.is_error and error_data(bad)["field"] == "profile"
        bad_wait = await s.call_tool("wait", {"agent_id": "ag_x", "timeout_seconds": 9999})
        assert bad_wait.is_error and error_data(bad_wait)["field"] == "timeout_seconds"
        missing = await s.call_tool("answer", {})
        assert missing.is_error and error_data(missing)["field"] == "agent_id"
        unknown = await s.call_tool("agent", {"agent_id": "ag_0000000000"})
        assert unknown.is_error and error_data(unknown)["code"] == "AgentNotFound"
        assert "AgentNotFound" in unknown.content[0].text


async def test_daemon_down_and_not_startable_gives_clear_is_error(home, workdir):
    async with mcp_session(home, env={"AGENT_RUN_NO_AUTOSTART": "1"}) as s:
        result = await s.call_tool("start", {"task": "answer: x", "workdir": str(workdir)})
        assert result.is_error
        assert error_data(result)["code"] == "DaemonUnavailable"
        assert "Nothing was executed" in result.content[0].text
    assert not home.socket_path.exists()
    assert not home.db_path.exists(), "the MCP server must never touch the database itself"


async def test_daemon_that_fails_to_start_gives_is_error_naming_the_cause(home, workdir):
    (home.root / "config.toml").write_text("schema_version = 1\nbogus = true\n")
    async with mcp_session(home) as s:
        result = await s.call_tool("list_agents", {})
        assert result.is_error
        assert (
            error_data(result)["code"] == "ConfigInvalid"
        )  # with its field, not DaemonUnavailable
        assert error_data(result)["field"] == "bogus"
        assert "bogus" in result.content[0].text
    assert not home.socket_path.exists()  # no daemon was started


async def test_mcp_autostarts_the_daemon_when_none_answers(home, workdir):
    try:
        async with mcp_session(home) as s:
            result = await s.call_tool("doc", {})
            assert not result.is_error
        assert "started one" in (home.root / "mcp-test.err").read_text()
    finally:
        pid = int((home.root / "daemon.lock").read_text().strip())
        os.kill(pid, signal.SIGTERM)


async def test_client_disconnecting_mid_wait_leaves_the_agent_running(daemon, workdir):
    agent = daemon.call(
        "start", {"task": "steps: 30\nstep_seconds: 0.1\nanswer: survived", "workdir": str(workdir)}
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import anyio, sys
sys.path.insert(0, {str(os.getcwd())!r})
from tests.mcp_harness import mcp_session
from agent_run.system.home import Home
async def main():
    async with mcp_session(Home.resolve({str(daemon.home.root)!r})) as s:
        print("waiting", flush=True)
        await s.call_tool("wait", {{"agent_id": {agent["id"]!r}, "timeout_seconds": 60}})
anyio.run(main)
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "waiting"
    proc.kill()  # the MCP client vanishes mid-wait
    proc.wait()
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    assert result["agent"]["state"] == "succeeded"
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "survived"


async def test_tool_table_is_identical_on_socket_mcp_cli_and_web(daemon, web):
    socket_tools = {t["name"]: t for t in daemon.call("tools")["tools"]}
    async with mcp_session(daemon.home) as s:
        listed = await s.list_tools()
    mcp_tools = {t.name: t for t in listed.tools}
    web_tools = {t["name"]: t for t in web.client().get("/api/tools").json()["tools"]}
    assert set(socket_tools) == set(mcp_tools) == set(web_tools) == set(TOOLS)
    assert web_tools == socket_tools
    for name, tool in mcp_tools.items():
        sock = socket_tools[name]
        assert tool.description == sock["description"], name
        assert tool.input_schema == sock["inputSchema"], name
        assert tool.output_schema == sock["outputSchema"], name
        annotations = tool.annotations
        assert (
            annotations.read_only_hint,
            annotations.destructive_hint,
            annotations.idempotent_hint,
        ) == (
            sock["annotations"]["readOnlyHint"],
            sock["annotations"]["destructiveHint"],
            sock["annotations"]["idempotentHint"],
        ), name
    for name, tool in TOOLS.items():
        command = command_for(cli_group, tool.cli_verb)
        assert command is not None, f"tool {name} has no CLI verb"
        covered = {param.name for param in command.params}
        missing = set(tool.params.model_fields) - covered
        assert not missing, f"CLI verb {tool.cli_verb} lacks params {missing}"
        flags = [
            name for name, field in tool.params.model_fields.items() if field.annotation is bool
        ]
        assert command.help == cli_words(tool.doc, flags)  # `--confirm` for `confirm=true`


async def test_an_argument_over_the_daemons_line_limit_is_a_line_too_long_is_error_naming_it(
    daemon, workdir
):
    from agent_run.rpc.protocol import MAX_LINE_BYTES

    task = "é" * (
        MAX_LINE_BYTES // 2 + 1000
    )  # under the 1,000,000-character limit, over 1 MiB encoded
    async with mcp_session(daemon.home) as s:
        big = await s.call_tool("start", {"task": task, "workdir": str(workdir)})
        assert big.is_error, big.content
        error = error_data(big)
        assert error["code"] == "LineTooLong" and error["field"] == "task"
        assert "LineTooLong" in big.content[0].text and "Broken pipe" not in big.content[0].text
        steer = await s.call_tool(
            "steer", {"agent_id": "ag_abc", "text": '"' * 99_000 + "\\" * 1000}
        )
        assert (
            error_data(steer)["code"] == "AgentNotFound"
        )  # 100k escaped chars fit: it reached the daemon
        # The session and the daemon carry on.
        listed = await s.call_tool("list_agents", {})
        assert not listed.is_error and listed.structured_content["total"] == 0


async def test_loose_argument_types_are_refused_over_mcp_as_on_the_socket(daemon, workdir):
    async with mcp_session(daemon.home) as s:
        for name, arguments, field in [
            ("list_agents", {"limit": True}, "limit"),
            ("list_agents", {"offset": 2**63}, "offset"),
            (
                "start",
                {"task": "answer: x", "workdir": str(workdir), "wall_seconds": "1"},
                "wall_seconds",
            ),
            ("start", {"task": "answer: x", "workdir": str(workdir), "runtime": ""}, "runtime"),
        ]:
            result = await s.call_tool(name, arguments)
            assert result.is_error and error_data(result)["field"] == field, (
                name,
                arguments,
                result.content,
            )


HOSTILE_LINES = [  # (line, the id its reply carries, its JSON-RPC code, the member it names)
    ('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "x"}', 2, -32600, "params"),
    ('{"jsonrpc": "2.0", "id": "three", "method": 5}', "three", -32600, "method"),
    ('{"jsonrpc": "1.0", "id": 4, "method": "tools/list"}', 4, -32600, "jsonrpc"),
    ('{"jsonrpc": "2.0", "id": 5}', 5, -32600, "method"),
    ('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', None, -32600, "id"),
    ('{"jsonrpc": "2.0", "id": 7, "method": "tools/list"', None, -32700, None),  # not JSON
    ("[1, 2]", None, -32600, None),
]


class Lines:
    """A child's stdout read line by line, each within a bound (no buffer hides a line from
    select: the bytes are read here)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.fd, self.buffer = proc.stdout.fileno(), b""

    def next(self, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self.fd], [], [], left)[0], "no reply in time"
            chunk = os.read(self.fd, 65536)
            assert chunk, "the server closed its stdout"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def test_every_line_that_is_not_a_json_rpc_message_gets_an_error_reply_with_its_id(home):
    env = {k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_run", "--home", str(home.root), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**env, "AGENT_RUN_NO_AUTOSTART": "1"},
    )
    replies = Lines(proc)

    def send(line: str) -> dict:
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        return replies.next()

    try:
        initialized = send(
            '{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": '
            '"2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}'
        )
        assert initialized["id"] == 0
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        for line, request_id, code, field in HOSTILE_LINES:
            reply = send(line)
            assert reply["id"] == request_id, (line, reply)
            error = reply["error"]
            assert error["code"] == code, (line, reply)
            assert error["data"].get("field") == field, (line, reply)
        listed = send('{"jsonrpc": "2.0", "id": 9, "method": "tools/list"}')  # it carries on
        assert listed["id"] == 9 and {t["name"] for t in listed["result"]["tools"]} == set(TOOLS)
    finally:
        proc.kill()
        proc.wait()
