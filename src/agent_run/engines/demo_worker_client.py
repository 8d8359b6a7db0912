"""The demo engine's MCP client: one worker-tool call over stdio JSON-RPC, stdlib only.

The demo program calls a worker tool the way a real engine does: it starts the first server of a
Claude-style `--mcp-config` file, performs the `initialize` handshake and sends one `tools/call`.
It is a few lines of newline-delimited JSON-RPC 2.0 instead of the mcp SDK (whose import alone
cost each call about two seconds). Like the SDK's stdio client, the server inherits only a safe
subset of the environment plus the config's `env`, in a session of its own.
"""

import json
import os
import subprocess
from typing import IO, Any

PROTOCOL_VERSION = "2025-06-18"
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
EXIT_GRACE_SECONDS = 2.0


class WorkerToolError(Exception):
    """The server broke the protocol: it closed its output, answered garbage or with an error."""


def first_server(mcp_config: str) -> dict[str, Any]:
    with open(mcp_config) as fh:
        return dict(next(iter(json.load(fh)["mcpServers"].values())))


def server_environment(server: dict[str, Any]) -> dict[str, str]:
    env = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    return env | dict(server.get("env") or {})


class StdioSession:
    """Requests and their responses, one JSON object a line, over a child's stdin/stdout."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        while True:
            line = self.stdout.readline()
            if not line:
                raise WorkerToolError(f"the server closed its output before answering {method}")
            message = json.loads(line)
            if not isinstance(message, dict) or message.get("id") != self.next_id:
                continue  # a notification or a request of the server's: not our answer
            if "error" in message:
                raise WorkerToolError(f"{method}: {message['error'].get('message')}")
            return dict(message["result"])


def call_worker_tool(mcp_config: str, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    """Call `tool` on the first MCP server in a Claude-style --mcp-config file: (text, is_error)."""
    server = first_server(mcp_config)
    proc = subprocess.Popen(
        [server["command"], *server.get("args", [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=server_environment(server),
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        session = StdioSession(proc.stdin, proc.stdout)
        session.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "agent-run-demo-engine", "version": "1"},
            },
        )
        session.send({"method": "notifications/initialized"})
        result = session.request("tools/call", {"name": tool, "arguments": arguments})
    finally:
        close(proc)
    blocks = [block for block in result.get("content") or [] if isinstance(block, dict)]
    text = "\n".join(block.get("text", "") for block in blocks)
    return text, bool(result.get("isError"))


def close(proc: "subprocess.Popen[bytes]") -> None:
    """End of input asks the server to exit; one that does not is killed."""
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except BrokenPipeError:
            pass
    try:
        proc.wait(timeout=EXIT_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
