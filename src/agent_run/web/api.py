"""The HTTP JSON API, generated from the tool table: `POST /api/tools/<name>`, `GET /api/tools`.

The body is the tool's params object; the answer is its result model, or `{"error": {code,
message, field?}}` exactly as the socket reports it (the daemon validates, so every transport
shares one message)."""

from starlette.requests import Request
from starlette.responses import JSONResponse

from agent_run.domain.errors import DomainError, LineTooLong
from agent_run.rpc.protocol import MAX_LINE_BYTES, BadMessage, decode
from agent_run.tools.table import TOOLS, tool_schemas
from agent_run.web.security import require_csrf

STATUS = {
    "InvalidParams": 422,
    "AgentNotFound": 404,
    "BatchNotFound": 404,
    "RunNotFound": 404,
    "UnknownTool": 404,
    "Conflict": 409,
    "RunLocked": 409,
    "DaemonUnavailable": 503,
    "LineTooLong": 413,
}
# A body can only become one request line to the daemon; past twice its limit it is not read on.
MAX_BODY_BYTES = 2 * MAX_LINE_BYTES


def error_response(data: dict) -> JSONResponse:
    error = {k: data[k] for k in ("code", "message", "field") if data.get(k) is not None}
    return JSONResponse({"error": error}, status_code=STATUS.get(error["code"], 400))


async def list_tools(_request: Request) -> JSONResponse:
    return JSONResponse({"tools": tool_schemas()})


async def call_tool(request: Request) -> JSONResponse:
    require_csrf(request)
    name = request.path_params["name"]
    if name not in TOOLS:
        return error_response(
            {
                "code": "UnknownTool",
                "field": "name",
                "message": f"no tool {name!r}; tools: {', '.join(TOOLS)}",
            }
        )
    body = await _body(request)
    if body is None:
        too_long = LineTooLong(
            f"the body is over {MAX_BODY_BYTES} bytes; a request line to the daemon may be at "
            f"most {MAX_LINE_BYTES}",
            limit=MAX_LINE_BYTES,
        )
        return error_response(too_long.to_data())
    try:  # the socket's checks: strict UTF-8 JSON, no lone surrogate, bounded nesting
        params = decode(body or b"{}")
    except BadMessage as exc:
        if exc.data_code == "ParseError":
            why = exc.message.removeprefix("parse error: ")
            return error_response(
                {"code": "InvalidParams", "message": f"the body is not JSON: {why}"}
            )
        return error_response({"code": exc.data_code, "message": f"the body: {exc.message}"})
    if not isinstance(params, dict):
        return error_response(
            {"code": "InvalidParams", "message": "the body must be a JSON object"}
        )
    try:
        result = await request.app.state.proxy.call(name, params)
    except DomainError as exc:
        return error_response(exc.to_data())
    return JSONResponse(result)


async def _body(request: Request) -> bytes | None:
    """The request's body, or None once it grows past MAX_BODY_BYTES (the rest left unread)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
