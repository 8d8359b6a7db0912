"""An agent orchestrating agents: the real Claude Code CLI, scripted by the mock provider, uses
`agent-run mcp` as its MCP server to start a demo agent, wait for it and read its answer."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.engine_harness import PLANTED_KEY, node_bin
from tests.harness import short_tmpdir
from tests.support.mock_provider import Dynamic, MockProvider, Text, ToolCall

DEMO_ANSWER = "forty-two, computed by the demo agent"


def _agent_id(request) -> str:
    for result in request.tool_results():
        found = re.search(r"\bag_[0-9a-z]{18}\b", result.output)
        if found:
            return found.group(0)
    raise AssertionError(f"no agent id in tool results: {request.tool_results()}")


def _answer_text(request) -> str:
    # Claude Code hands the model our structuredContent (JSON) when a tool returns one.
    return json.loads(request.tool_results()[-1].output)["text"]


@pytest.mark.engines
def test_claude_code_starts_waits_and_reads_a_demo_agent_through_agent_run_mcp(daemon, workdir):
    server = {
        "command": sys.executable,
        "args": ["-m", "agent_run", "--home", str(daemon.home.root), "mcp"],
    }
    script = [
        ToolCall(
            "mcp__agent-run__start",
            {
                "task": f"steps: 3\nanswer: {DEMO_ANSWER}",
                "workdir": str(workdir),
                "runtime": "demo",
            },
        ),
        Dynamic(
            lambda r: ToolCall(
                "mcp__agent-run__wait", {"agent_id": _agent_id(r), "timeout_seconds": 50}
            )
        ),
        Dynamic(lambda r: ToolCall("mcp__agent-run__answer", {"agent_id": _agent_id(r)})),
        Dynamic(lambda r: Text(f"The delegated agent answered: {_answer_text(r)}")),
    ]
    home = short_tmpdir("arc-")
    (home / "mcp.json").write_text(json.dumps({"mcpServers": {"agent-run": server}}))
    with MockProvider(script) as mp:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "ANTHROPIC_BASE_URL": mp.url,
            "ANTHROPIC_API_KEY": PLANTED_KEY,
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "MCP_CONNECTION_NONBLOCKING": "0",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
        result = subprocess.run(
            [
                str(node_bin() / "claude"),
                "-p",
                "Delegate the question to an agent-run demo agent.",
                "--output-format",
                "stream-json",
                "--verbose",
                "--setting-sources",
                "",
                "--strict-mcp-config",
                "--mcp-config",
                str(home / "mcp.json"),
                "--allowedTools",
                "mcp__agent-run__start,mcp__agent-run__wait,mcp__agent-run__answer",
            ],
            env=env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    final = next(line for line in reversed(lines) if line.get("type") == "result")
    assert final["is_error"] is False, result.stdout[-3000:]
    assert final["result"] == f"The delegated agent answered: {DEMO_ANSWER}"
    listed = daemon.call("list_agents", {})
    assert listed["total"] == 1 and listed["items"][0]["state"] == "succeeded"
    assert daemon.call("answer", {"agent_id": listed["items"][0]["id"]})["text"] == DEMO_ANSWER
