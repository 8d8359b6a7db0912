"""Worker tools: the per-agent MCP server, bound to one execution by a capability token."""

import json
import os
import sys

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agent_run.store import wake
from agent_run.store.db import connect, write
from agent_run.worker_tools.binding import token_hash
from tests.harness import db_rows, wait_for
from tests.test_admission import admit_without_spawning


def test_demo_finish_through_mcp_becomes_answer_and_verdict(daemon, home, workdir):
    agent = daemon.call(
        "start",
        {
            "task": "steps: 2\nfinish: Fixed the flaky test\nfinish_status: blocked",
            "workdir": str(workdir),
        },
    )
    view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert view["state"] == "succeeded"
    assert view["verdict"] == "blocked"
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "Fixed the flaky test"
    reports = db_rows(
        home, "SELECT tool, payload FROM tool_reports WHERE agent_id = ?", (agent["id"],)
    )
    assert [(r["tool"], json.loads(r["payload"])) for r in reports] == [
        ("finish", {"summary": "Fixed the flaky test", "status": "blocked"})
    ]
    execution_dir = home.agents_dir / agent["id"] / view["execution"]["id"]
    assert not (execution_dir / "mcp.json").exists(), "the token file must go with the execution"


def test_finish_with_invalid_status_is_refused_and_the_engine_text_is_the_answer(
    daemon, home, workdir
):
    agent = daemon.call(
        "start",
        {
            "task": "finish: done it\nfinish_status: maybe\nanswer: plain answer",
            "workdir": str(workdir),
        },
    )
    view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert view["state"] == "succeeded" and view["verdict"] is None
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "plain answer"
    assert db_rows(home, "SELECT count(*) AS n FROM tool_reports")[0]["n"] == 0
    tool_results = [
        i["content"]
        for i in daemon.call("transcript", {"agent_id": agent["id"]})["items"]
        if i["role"] == "tool"
    ]
    assert any("invalid status" in t for t in tool_results), tool_results


async def _call_finish(home, execution_id: str, token: str) -> tuple[str, bool]:
    env = {
        "AGENT_RUN_HOME": str(home.root),
        "AGENT_RUN_EXECUTION_ID": execution_id,
        "AGENT_RUN_WORKER_TOKEN": token,
        "PATH": os.environ["PATH"],
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agent_run.worker_tools"], env=env
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            assert [t.name for t in tools.tools] == ["finish"]
            result = await session.call_tool("finish", {"summary": "forged", "status": "done"})
            return result.content[0].text, bool(result.is_error)


def test_wrong_token_or_ended_execution_is_refused_and_records_nothing(daemon, home, workdir):
    agent = daemon.call(
        "start", {"task": "steps: 100\nstep_seconds: 0.05\nanswer: real", "workdir": str(workdir)}
    )
    row = wait_for(
        lambda: next(
            iter(
                db_rows(
                    home,
                    "SELECT * FROM executions WHERE agent_id = ? AND worker_token_sha256 IS NOT NULL",
                    (agent["id"],),
                )
            ),
            None,
        )
    )
    text, is_error = anyio.run(_call_finish, home, row["id"], "not-the-token")
    assert is_error and "not bound" in text
    assert row["worker_token_sha256"] != token_hash("not-the-token")
    daemon.call("cancel", {"agent_id": agent["id"]})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 30})
    assert db_rows(home, "SELECT count(*) AS n FROM tool_reports")[0]["n"] == 0


def test_a_recorded_report_nudges_the_daemon_and_a_refused_one_does_not(home, workdir):
    """The worker-tools server's commit wakes the daemon's waiters (a batch waiting on a
    worker's result) at once; a refused call commits nothing and sends nothing."""
    _agent_id, execution_id = admit_without_spawning(home, "answer: x", workdir)
    conn = connect(home.db_path)
    with write(conn):
        conn.execute(
            "UPDATE executions SET worker_token_sha256 = ? WHERE id = ?",
            (token_hash("the-token"), execution_id),
        )
    conn.close()
    listener = wake.listen(home.wake_path)
    assert listener is not None
    text, is_error = anyio.run(_call_finish, home, execution_id, "not-the-token")
    assert is_error and wake.drain(listener) == 0
    text, is_error = anyio.run(_call_finish, home, execution_id, "the-token")
    assert not is_error and text.startswith("recorded"), text
    assert wake.drain(listener) == 1
    listener.close()


@pytest.mark.parametrize("status", ["done", "failed"])
def test_verdict_is_separate_from_outcome(daemon, workdir, status):
    agent = daemon.call(
        "start", {"task": f"finish: tried\nfinish_status: {status}", "workdir": str(workdir)}
    )
    view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert (view["state"], view["verdict"]) == ("succeeded", status)
