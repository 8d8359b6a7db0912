"""Real MCP clients, not only ours: the MCP Inspector CLI, `claude mcp`, `codex mcp`, headless
`claude -p` and `codex exec` calling an agent-run tool (their model scripted by the suite's mock
provider), and the Python SDK snippet of docs/mcp.md. The CLIs come from the pinned package.json
(`npm ci`)."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_harness import PLANTED_KEY, node_bin
from tests.harness import kill_leftovers, short_tmpdir
from tests.support.mock_provider import Dynamic, MockProvider, Text, ToolCall

ROOT = Path(__file__).parent.parent
VENV_BIN = Path(sys.executable).parent
MCP_DOC = ROOT / "docs" / "mcp.md"


def node_tool(name: str) -> str:
    path = node_bin() / name
    assert path.exists(), f"{path} is missing: run `npm ci` (scripts/test does)"
    return str(path)


# The pinned Inspector exits 5 when a tool returns isError (and still prints the result).
INSPECTOR_TOOL_ERROR_EXIT = 5


def inspector(home, *args: str) -> dict:
    """Run the Inspector CLI on `agent-run mcp` and parse its JSON output."""
    result = subprocess.run(
        [
            node_tool("mcp-inspector"),
            "--cli",
            # `agent-run mcp` boots in ~1 s quiet; a loaded machine takes longer than the
            # default 15 s (the subprocess bound below still holds)
            "--connect-timeout",
            "90000",
            sys.executable,
            "-m",
            "agent_run",
            "--home",
            str(home.root),
            "mcp",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/tmp",
    )
    assert result.returncode in (0, INSPECTOR_TOOL_ERROR_EXIT), result.stderr
    output = json.loads(result.stdout)
    assert (result.returncode == INSPECTOR_TOOL_ERROR_EXIT) == bool(output.get("isError")), result
    return output


@pytest.mark.engines
def test_inspector_lists_tools_and_runs_start_wait_answer(daemon, workdir):
    from agent_run.tools.table import TOOLS

    listed = inspector(daemon.home, "--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == set(TOOLS)
    start_tool = next(t for t in listed["tools"] if t["name"] == "start")
    assert start_tool["outputSchema"]["properties"]["id"]["type"] == "string"
    assert start_tool["annotations"]["readOnlyHint"] is False

    started = inspector(
        daemon.home,
        "--method",
        "tools/call",
        "--tool-name",
        "start",
        "--tool-arg",
        "task=answer: hello inspector",
        "--tool-arg",
        f"workdir={workdir}",
    )
    assert started["isError"] is False
    agent_id = started["structuredContent"]["id"]
    waited = inspector(
        daemon.home,
        "--method",
        "tools/call",
        "--tool-name",
        "wait",
        "--tool-arg",
        f"agent_id={agent_id}",
        "--tool-arg",
        "timeout_seconds=60",
    )
    assert waited["structuredContent"]["agent"]["state"] == "succeeded"
    answer = inspector(
        daemon.home,
        "--method",
        "tools/call",
        "--tool-name",
        "answer",
        "--tool-arg",
        f"agent_id={agent_id}",
    )
    assert answer["structuredContent"]["text"] == "hello inspector"
    bad = inspector(
        daemon.home,
        "--method",
        "tools/call",
        "--tool-name",
        "answer",
        "--tool-arg",
        "agent_id=nope",
    )
    assert bad["isError"] is True and "structuredContent" not in bad
    assert json.loads(bad["content"][-1]["text"])["error"]["field"] == "agent_id"


def _doc_block(language: str, starts_with: str) -> str:
    for block in re.findall(rf"```{language}\n(.*?)```", MCP_DOC.read_text(), re.S):
        if block.lstrip().startswith(starts_with):
            return block
    raise AssertionError(f"docs/mcp.md has no {language} block starting with {starts_with!r}")


@pytest.fixture
def user_home():
    """A generated HOME for an engine CLI, with agent-run and the CLIs on PATH."""
    home = short_tmpdir("aru-")
    env = {
        "HOME": str(home),
        "PATH": f"{VENV_BIN}:{node_bin()}:/usr/local/bin:/usr/bin:/bin",
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CODEX_HOME": str(home / ".codex"),
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    (home / ".codex").mkdir()
    yield home, env
    from agent_run.system.home import Home

    agent_home = Home(home / ".agent-run")
    lock = agent_home.lock_path
    if lock.exists() and lock.read_text().strip():
        try:
            os.kill(int(lock.read_text().strip()), signal.SIGTERM)
        except ProcessLookupError:
            pass
    kill_leftovers(agent_home)


def _run_doc_lines(
    block: str, env: dict, cwd: Path, timeout: float = 120
) -> list[subprocess.CompletedProcess]:
    results = []
    for line in block.strip().splitlines():
        result = subprocess.run(
            line, shell=True, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
        assert result.returncode == 0, f"{line}: {result.stdout}{result.stderr}"
        results.append(result)
    return results


@pytest.mark.engines
def test_claude_mcp_add_registers_agent_run_and_list_shows_it_connected(user_home):
    home, env = user_home
    results = _run_doc_lines(_doc_block("sh", "claude mcp add"), env, home)
    listing = results[-1].stdout
    assert "agent-run" in listing and "Connected" in listing, listing


@pytest.mark.engines
def test_codex_mcp_add_registers_agent_run_and_list_shows_it_enabled(user_home):
    home, env = user_home
    results = _run_doc_lines(_doc_block("sh", "codex mcp add"), env, home)
    listing = results[-1].stdout
    assert re.search(r"agent-run\s+agent-run\s+mcp\s.*enabled", listing), listing
    config = (home / ".codex" / "config.toml").read_text()
    assert "[mcp_servers.agent-run]" in config and 'args = ["mcp"]' in config


def test_generic_python_client_snippet_runs_start_wait_answer(daemon, workdir):
    block = _doc_block("python", "import os")
    env = {
        **os.environ,
        "AGENT_RUN_HOME": str(daemon.home.root),
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
    }
    result = subprocess.run(
        [sys.executable, "-c", block],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "succeeded hello over MCP"


HEADLESS_ANSWER = "hi from a headless orchestrator"


def _delegation(tool_prefix: str, workdir: Path) -> list:
    """The orchestrating model's script: start a demo agent through agent-run, wait for it (again
    while a wait times out: a loaded machine), read its answer, and say it."""

    def step(request) -> ToolCall | Text:
        outputs = [result.output for result in request.tool_results()]
        if not outputs:
            task = {"task": f"answer: {HEADLESS_ANSWER}", "workdir": str(workdir)}
            return ToolCall(f"{tool_prefix}start", task)
        agent_id = re.findall(r"\bag_[0-9a-z]{18}\b", "\n".join(outputs))[0]
        if '"sha256"' in outputs[-1]:
            return Text(f"The agent said: {outputs[-1]}")
        if re.search(r'"timed_out":\s*false', outputs[-1]):
            return ToolCall(f"{tool_prefix}answer", {"agent_id": agent_id})
        return ToolCall(f"{tool_prefix}wait", {"agent_id": agent_id, "timeout_seconds": 50})

    return [Dynamic(step, times=None)]


def _answered(provider: MockProvider) -> str:
    """The answer tool's result as the model received it."""
    outputs = [r.output for q in provider.main_requests() for r in q.tool_results()]
    return next((o for o in reversed(outputs) if '"sha256"' in o), f"no answer in {outputs}")


@pytest.mark.engines
def test_claude_p_calls_agent_run_tools_headless_with_the_documented_allowed_tools(
    user_home, workdir
):
    home, env = user_home
    _run_doc_lines(_doc_block("sh", "claude mcp add"), env, home)
    with MockProvider(_delegation("mcp__agent-run__", workdir)) as provider:
        headless = {
            **env,
            "ANTHROPIC_BASE_URL": provider.url,
            "ANTHROPIC_API_KEY": PLANTED_KEY,
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
        block = _doc_block("sh", "MCP_CONNECTION_NONBLOCKING=0 claude -p")
        [result] = _run_doc_lines(block, headless, workdir, timeout=300)
        assert HEADLESS_ANSWER in _answered(provider), result.stdout
    assert "The agent said: " in result.stdout and HEADLESS_ANSWER in result.stdout


@pytest.mark.engines
def test_codex_exec_calls_agent_run_tools_headless_with_the_documented_required_entry(
    user_home, workdir
):
    home, env = user_home
    # Codex names the server's tools as a JavaScript identifier: `mcp__agent_run__start`.
    with MockProvider(_delegation("mcp__agent_run__", workdir)) as provider:
        (home / ".codex" / "config.toml").write_text(
            'model = "gpt-5.5"\nmodel_provider = "mock"\n[model_providers.mock]\n'
            f'name = "mock"\nbase_url = "{provider.url}/v1"\nwire_api = "responses"\n'
            'env_key = "ORCH_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n\n'
            + _doc_block("toml", "[mcp_servers.agent-run]")
        )
        headless = {**env, "ORCH_KEY": "orchestrator-test-key"}
        [result] = _run_doc_lines(_doc_block("sh", "codex exec"), headless, workdir, timeout=300)
        assert HEADLESS_ANSWER in _answered(provider), result.stdout + result.stderr
    assert HEADLESS_ANSWER in result.stdout
