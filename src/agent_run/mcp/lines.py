"""The first look at each line `agent-run mcp` reads on stdin: a line that is not a JSON-RPC
message is answered with an error (carrying its id when it has one) instead of being dropped,
so a client never waits for a reply that will not come. The MCP SDK's stdio transport drops
such a line (it logs it and sends nothing); this filter sits in front of it."""

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


class CheckedLines:
    """stdin's lines for the SDK's `stdio_server(stdin=...)`, less those that are not JSON-RPC
    messages: each of those is answered on the transport's write stream (`attach`), which the
    server's replies share, so replies never interleave within a line."""

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self.lines = lines
        self.replies: Any = None
        self.attached = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        self.replies = write_stream
        self.attached.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._checked()

    async def _checked(self) -> AsyncIterator[str]:
        async for line in self.lines:
            if not line.strip():
                continue
            reply = refusal(line)
            if reply is None:
                yield line
                continue
            await self.attached.wait()
            try:
                await self.replies.send(SessionMessage(reply))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the session is over


def refusal(line: str) -> types.JSONRPCError | None:
    """None for a JSON-RPC message; else the error reply: -32700 (id null) for a line that is
    not JSON, -32600 naming the culprit member for JSON that is not a message (with the line's
    id when it carries a valid one, else null). An id that is neither a string nor an integer
    is refused too: the SDK would take such a request for a notification and never answer."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return _error(None, PARSE_ERROR, f"parse error: {exc}"[:500], None)
    if not isinstance(message, dict):
        return _error(None, INVALID_REQUEST, "invalid message: not a JSON object", None)
    raw_id = message.get("id")
    valid_id = isinstance(raw_id, str) or (isinstance(raw_id, int) and not isinstance(raw_id, bool))
    if "id" in message and not valid_id:
        return _error(
            None, INVALID_REQUEST, "invalid message: an id must be a string or an integer", "id"
        )
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return None
    except ValidationError:
        pass
    field, why = _culprit(message)
    return _error(raw_id if valid_id else None, INVALID_REQUEST, f"invalid message: {why}", field)


def _culprit(message: dict[str, Any]) -> tuple[str, str]:
    """The member that keeps this object from being a JSON-RPC 2.0 message, and why."""
    if message.get("jsonrpc") != "2.0":
        return "jsonrpc", 'need "jsonrpc": "2.0"'
    if "method" in message and not isinstance(message["method"], str):
        return "method", "method must be a string"
    if "params" in message and not isinstance(message["params"], dict):
        return "params", "params must be an object"
    if "method" not in message:
        return "method", "need a method (a request or notification) or a result or error"
    return "<message>", "not a JSON-RPC request, notification or response"


def _error(request_id: Any, code: int, message: str, field: str | None) -> types.JSONRPCError:
    data = {"code": "MalformedRequest" if code == INVALID_REQUEST else "ParseError"}
    if field is not None:
        data["field"] = field
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(code=code, message=message, data={**data, "message": message}),
    )
