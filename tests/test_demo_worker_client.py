"""The demo engine's stdlib MCP client, against real child processes speaking stdio JSON-RPC."""

import json
import sys
from pathlib import Path

import pytest

from agent_run.engines.demo_worker_client import WorkerToolError, call_worker_tool

# A server that answers the handshake, then answers tools/call with the environment it was given.
ENV_SERVER = r"""
import json, os, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {}}
    else:
        text = json.dumps({"env": dict(os.environ), "call": msg["params"]})
        result = {"content": [{"type": "text", "text": text}], "isError": True}
    print(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}), flush=True)
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""


def _config(tmp_path: Path, code: str, env: dict[str, str] | None = None) -> str:
    path = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": ["-c", code], "env": env or {}}
    path.write_text(json.dumps({"mcpServers": {"worker": server}}))
    return str(path)


def test_the_call_reaches_the_server_with_only_a_safe_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", "sk-not-for-the-server")
    config = _config(tmp_path, ENV_SERVER, {"AGENT_RUN_WORKER_TOKEN": "tok"})
    text, is_error = call_worker_tool(config, "finish", {"summary": "s", "status": "done"})
    seen = json.loads(text)
    assert is_error is True
    assert seen["call"] == {"name": "finish", "arguments": {"summary": "s", "status": "done"}}
    assert seen["env"]["AGENT_RUN_WORKER_TOKEN"] == "tok"
    assert "SOME_PROVIDER_API_KEY" not in seen["env"]
    assert set(seen["env"]) - {"AGENT_RUN_WORKER_TOKEN", "LC_CTYPE"} <= {
        "HOME",
        "LOGNAME",
        "PATH",
        "SHELL",
        "TERM",
        "USER",
    }


def test_a_server_that_dies_before_answering_is_a_typed_error(tmp_path):
    config = _config(tmp_path, "import sys; sys.stdin.readline()")
    with pytest.raises(WorkerToolError, match="closed its output before answering initialize"):
        call_worker_tool(config, "finish", {})


def test_a_json_rpc_error_answer_is_a_typed_error(tmp_path):
    code = (
        "import json, sys\nfor line in sys.stdin:\n    m = json.loads(line)\n"
        "    if 'id' in m: print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], "
        "'error': {'code': -32601, 'message': 'Method not found'}}), flush=True)\n"
    )
    with pytest.raises(WorkerToolError, match="initialize: Method not found"):
        call_worker_tool(_config(tmp_path, code), "finish", {})
