"""JSON-RPC 2.0 over newline-delimited JSON: error codes, framing limits, message builders,
and the checks that turn hostile input (bad Unicode, deep nesting, huge lines) into typed errors."""

import json
import re
from typing import TYPE_CHECKING, Any

from agent_run.domain import errors as e
from agent_run.domain.errors import LineTooLong

if TYPE_CHECKING:  # the client imports this module and must not pay for pydantic
    from pydantic import ValidationError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
DOMAIN_ERROR = -32000

# The typed error of each JSON-RPC code, for a reply whose `data` names no code of its own.
ERROR_BY_RPC_CODE: dict[int, type[e.DomainError]] = {
    PARSE_ERROR: e.ParseError,
    INVALID_REQUEST: e.MalformedRequest,
    METHOD_NOT_FOUND: e.MethodNotFound,
    INVALID_PARAMS: e.InvalidParams,
    INTERNAL_ERROR: e.InternalError,
    DOMAIN_ERROR: e.DomainError,
}

MAX_LINE_BYTES = 1024 * 1024  # one request line, newline excluded
MAX_NESTING = 64  # arrays / objects inside one message; no method needs more than a handful
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadMessage(Exception):
    """A line that cannot become a request: the JSON-RPC code and a typed `data`."""

    def __init__(self, code: int, message: str, data_code: str) -> None:
        super().__init__(message)
        self.code, self.message, self.data_code = code, message, data_code

    def reply(self) -> dict[str, Any]:
        return error(
            None, self.code, self.message, {"code": self.data_code, "message": self.message}
        )


def _refuse_constant(name: str) -> Any:
    raise BadMessage(PARSE_ERROR, f"parse error: {name} is not JSON", "ParseError")


def decode(line: bytes) -> Any:
    """Parse one line; raise `BadMessage` for anything that is not strict, valid UTF-8 JSON text
    with at most MAX_NESTING levels."""
    try:
        message = json.loads(line, parse_constant=_refuse_constant)
    except RecursionError:
        raise BadMessage(
            INVALID_REQUEST, f"nested deeper than {MAX_NESTING} levels", "NestingTooDeep"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, bad UTF-8, huge integers
        raise BadMessage(PARSE_ERROR, f"parse error: {exc}", "ParseError") from None
    _check_tree(message)
    return message


def _check_tree(message: Any) -> None:
    """Walk the parsed message without recursion: bounded depth, no lone surrogates."""
    stack: list[tuple[Any, int]] = [(message, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise BadMessage(
                    PARSE_ERROR,
                    "parse error: a string holds a lone UTF-16 surrogate (not valid Unicode)",
                    "InvalidUnicode",
                )
            continue
        if not isinstance(node, (dict, list)):
            continue
        if depth >= MAX_NESTING:
            raise BadMessage(
                INVALID_REQUEST, f"nested deeper than {MAX_NESTING} levels", "NestingTooDeep"
            )
        items = list(node.items()) if isinstance(node, dict) else [(None, v) for v in node]
        for key, value in items:
            if key is not None:
                stack.append((key, depth + 1))
            stack.append((value, depth + 1))


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def encode_request(request_id: Any, method: str, params: dict[str, Any]) -> bytes:
    """A request line, or `LineTooLong` naming the biggest param when it exceeds the daemon's
    limit (checked here, so a client never sends what the daemon must refuse)."""
    line = encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    if len(line) - 1 <= MAX_LINE_BYTES:
        return line
    sizes = {name: len(encode({"v": value})) - 7 for name, value in params.items()}
    field = max(sizes, key=sizes.__getitem__) if sizes else None
    detail = f"; `{field}` alone is {sizes[field]} bytes" if field else ""
    raise LineTooLong(
        f"the request is {len(line) - 1} bytes encoded, over the daemon's limit of "
        f"{MAX_LINE_BYTES} bytes per line{detail}",
        field=field,
        limit=MAX_LINE_BYTES,
    )


def response(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(
    request_id: Any, code: int, message: str, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


class RpcFailure(Exception):
    """An error reply given in full (code, message, data), for data that is not a DomainError's
    (InvalidParams' list of every problem)."""

    def __init__(self, code: int, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def rpc_code(exc: e.DomainError) -> int:
    """The JSON-RPC code a typed error travels under: the inverse of ERROR_BY_RPC_CODE, by the
    most specific class (NestingTooDeep is a MalformedRequest: -32600); -32000 for the rest."""
    for cls in type(exc).__mro__:
        for code, mapped in ERROR_BY_RPC_CODE.items():
            if cls is mapped and mapped is not e.DomainError:
                return code
    return DOMAIN_ERROR


def typed_error(request_id: Any, code: int, data: e.DomainError) -> dict[str, Any]:
    """An error reply whose `data` is the typed error (so every client maps it the same way)."""
    return error(request_id, code, data.message, data.to_data())


def line_too_long() -> dict[str, Any]:
    data = LineTooLong(
        f"a request line may be at most {MAX_LINE_BYTES} bytes", limit=MAX_LINE_BYTES
    )
    return error(None, INVALID_REQUEST, "request line too long", data.to_data())


def validation_error_data(exc: "ValidationError") -> dict[str, Any]:
    """`InvalidParams` with the dotted path of the first bad field, and every problem listed."""
    problems = [
        {"field": ".".join(str(p) for p in e["loc"]) or "<params>", "message": e["msg"]}
        for e in exc.errors(include_url=False)
    ]
    first = problems[0]
    return {
        "code": "InvalidParams",
        "message": f"{first['field']}: {first['message']}",
        "field": first["field"],
        "errors": problems,
    }


def error_from_reply(err: Any) -> e.DomainError:
    """The one mapping of a reply's `error` member to a typed error, for every client: `data.code`
    when the daemon sent one (its domain and protocol codes), else the class of the JSON-RPC
    code with `details.rpc_code`; an unknown code or a malformed member is a `ProtocolError`."""
    if not isinstance(err, dict) or not isinstance(err.get("code"), int):
        return e.ProtocolError(f"a malformed error reply: {str(err)[:200]}")
    data = err.get("data")
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return e.error_from_data(data)
    cls = ERROR_BY_RPC_CODE.get(err["code"], e.ProtocolError)
    return cls(str(err.get("message", "")), rpc_code=err["code"])


def result_from_reply(line: bytes) -> Any:
    """A reply line's `result`, or its error raised typed (`error_from_reply`)."""
    try:
        reply = json.loads(line)
    except ValueError as exc:
        raise e.ProtocolError(f"the daemon's reply is not JSON: {exc}") from None
    if not isinstance(reply, dict) or ("result" not in reply and "error" not in reply):
        raise e.ProtocolError(f"the daemon's reply has neither result nor error: {line[:200]!r}")
    if "error" in reply:
        raise error_from_reply(reply["error"])
    return reply["result"]
