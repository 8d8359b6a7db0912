"""A minimal MCP stdio server loop: newline-delimited JSON-RPC 2.0 on stdin/stdout, stdlib only.

Speaks what an engine needs of a tools-only server: `initialize` (echoing the client's protocol
version when it is one we speak, else offering our newest), `ping`, `tools/list`, `tools/call`;
notifications are ignored; anything else gets a typed JSON-RPC error, never a crash.
"""

import json
import sys
from collections.abc import Iterator
from typing import IO, Any, NamedTuple, Protocol

from agent_run import __version__
from agent_run.domain.text import may_hold_surrogates, well_formed
from agent_run.worker_tools.binding import SERVER_NAME

# The initialize-handshake revisions we answer with (the same set as the mcp SDK we replaced).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)
# The longest message read: a `finish` summary at its 200,000-character limit, every character
# escaped, is 1.2 MB of JSON.
MAX_LINE_BYTES = 4 * 1024 * 1024


class ToolAnswer(NamedTuple):
    text: str
    error: bool = False


class Tools(Protocol):
    def list(self) -> list[dict[str, Any]]: ...
    def call(self, name: Any, arguments: Any) -> ToolAnswer: ...


class RpcFailure(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def negotiate(requested: Any) -> str:
    return requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]


def _params(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RpcFailure(INVALID_PARAMS, "invalid params: must be an object", {"field": "params"})
    return params


def _tools_call(tools: Tools, params: dict[str, Any]) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments")
    if not isinstance(name, str):
        raise RpcFailure(INVALID_PARAMS, "invalid name: must be a string", {"field": "name"})
    if arguments is not None and not isinstance(arguments, dict):
        raise RpcFailure(
            INVALID_PARAMS, "invalid arguments: must be an object", {"field": "arguments"}
        )
    answer = tools.call(name, arguments)
    return {"content": [{"type": "text", "text": answer.text}], "isError": answer.error}


def dispatch(tools: Tools, method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return {
            "capabilities": {"tools": {"listChanged": False}},
            "protocolVersion": negotiate(params.get("protocolVersion")),
            "serverInfo": {"name": SERVER_NAME, "version": __version__},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": tools.list()}
    if method == "tools/call":
        return _tools_call(tools, params)
    raise RpcFailure(METHOD_NOT_FOUND, "Method not found", method)


def _error(msg_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def handle(tools: Tools, message: Any) -> dict[str, Any] | None:
    """The response to one decoded message, or None for a notification or a client's response."""
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
    msg_id, method = message.get("id"), message.get("method")
    if method is None and ("result" in message or "error" in message):
        return None  # a response to a request we never send: nothing to answer
    if not isinstance(method, str):
        return _error(
            msg_id, INVALID_REQUEST, "Invalid Request: method must be a string", {"field": "method"}
        )
    if "id" not in message:
        return None  # notifications (initialized, cancelled, ...) need no answer
    try:
        return {"jsonrpc": "2.0", "id": msg_id, "result": dispatch(tools, method, _params(message))}
    except RpcFailure as exc:
        return _error(msg_id, exc.code, exc.message, exc.data)
    except Exception as exc:  # a bug or a broken database: a typed answer, and the server lives on
        return _error(msg_id, INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")


def answer_line(tools: Tools, line: bytes) -> Any:
    try:
        text = line.decode()
        message = json.loads(text)
        if may_hold_surrogates(text):  # a summary or a reason is stored: U+FFFD, not a crash
            message = well_formed(message)
    except ValueError as exc:  # also bad UTF-8
        return _error(None, PARSE_ERROR, f"Parse error: {exc}")
    except RecursionError:
        return _error(None, PARSE_ERROR, "Parse error: nested too deeply")
    if isinstance(message, list):  # a JSON-RPC batch (allowed by the 2025-03-26 revision)
        if not message:
            return _error(None, INVALID_REQUEST, "Invalid Request: empty batch")
        answers = [a for a in (handle(tools, m) for m in message) if a is not None]
        return answers or None
    return handle(tools, message)


def _lines(stdin: IO[bytes]) -> Iterator[bytes | None]:
    """stdin's lines, each None that runs past MAX_LINE_BYTES (read through to its end, never
    held whole: the server shares its process with the supervisor)."""
    while line := stdin.readline(MAX_LINE_BYTES + 1):
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        while (rest := stdin.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield None
        if not rest:
            return


def serve_stdio(
    tools: Tools, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None
) -> None:
    """Answer line by line until stdin closes (or stdout does)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    for line in _lines(stdin):
        if line is None:
            answer: Any = _error(
                None, PARSE_ERROR, f"Parse error: a message is at most {MAX_LINE_BYTES} bytes"
            )
        elif not line.strip():
            continue
        else:
            answer = answer_line(tools, line)
        if answer is None:
            continue
        try:
            stdout.write(
                json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            )
            stdout.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client is gone
            return
