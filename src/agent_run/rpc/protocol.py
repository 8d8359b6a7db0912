"""JSON-RPC 2.0 over newline-delimited JSON: error codes, framing limits, message builders."""

import json
from typing import Any

from pydantic import ValidationError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
DOMAIN_ERROR = -32000

MAX_LINE_BYTES = 1024 * 1024  # one request line, newline excluded


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def response(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(request_id: Any, code: int, message: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def validation_error_data(exc: ValidationError) -> dict[str, Any]:
    """`InvalidParams` with the dotted path of the first bad field, and every problem listed."""
    problems = [{"field": ".".join(str(p) for p in e["loc"]) or "<params>", "message": e["msg"]}
                for e in exc.errors(include_url=False)]
    first = problems[0]
    return {"code": "InvalidParams", "message": f"{first['field']}: {first['message']}",
            "field": first["field"], "errors": problems}
