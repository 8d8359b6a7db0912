"""A scripted, loopback model provider that the test suite owns.

The real engine CLIs (Codex, Claude Code, Qwen Code) are pointed at this server instead of a
model vendor, so end-to-end tests run offline and deterministically. It speaks just enough of
three wire protocols, streaming with server-sent events:

* OpenAI Responses API    ``POST /v1/responses``          (Codex; ``GET /v1/models`` too)
* Anthropic Messages API  ``POST /v1/messages[?beta=true]`` (Claude Code; also
  ``POST /v1/messages/count_tokens``)
* OpenAI Chat Completions ``POST /v1/chat/completions``   (Qwen Code; streaming or not)

Any other path gets a harmless JSON answer (``{}`` for POST, 404 for GET) and is recorded.

Scripting
---------
A test gives an ordered list of replies for the *main* conversation. Each model request of the
main conversation takes the next reply from the front of the script:

``Text("done")``
    A plain assistant answer; the turn ends. ``Text("...", seconds=5)`` streams the text in
    small deltas spread over five seconds (for cancel/steer tests).
``ToolCall("Bash", {"command": "echo hi"})``
    One tool call, with the exact tool name the engine advertised (Claude ``Bash``/``Write``,
    Codex ``exec_command``/``shell``/``apply_patch``, Qwen ``run_shell_command``/``write_file``,
    an injected MCP tool such as ``mcp__worker__finish``). The engine runs the tool and sends the
    result back in its next request, which takes the next scripted reply. Codex calls MCP tools
    as a bare function in a namespace: ``ToolCall("mcp__worker__finish", ...)`` on the Responses
    API is sent as ``{"namespace": "mcp__worker", "name": "finish"}`` (split at the last
    ``__``; or pass ``namespace=`` yourself). Codex 0.171 defers MCP tools behind its
    ``tool_search`` tool, so they are not in the request's tool list, but a direct call works.
    A Codex tool advertised as ``custom`` (freeform, e.g. ``apply_patch``) is answered with a
    ``custom_tool_call``; pass its input (the patch text) as a string.
``Fault.http(429, retry_after=1)``, ``Fault.http(401)``, ``Fault.http(500)``, ``Fault.http(529)``
    An HTTP error with the API's own error body (and a ``retry-after`` header when given).
``Fault.malformed()``, ``Fault.cut()``, ``Fault.cut(abort=True)``
    A 200 stream with a line that is not JSON; a stream that ends (cleanly, or by dropping the
    connection with ``abort=True``) after some text but before its terminal event. A
    non-streaming request (Claude Code retries that way once) gets a JSON body that does not
    parse, or one cut short of its ``Content-Length``.
``Fault.silent_after_headers()``, ``Fault.silent_before_headers()``
    Hold the connection open, with or without response headers, until the server is closed.

``Dynamic(lambda request: ToolCall(...))``
    A reply built from the request it answers (for example from a tool result in it).

Every reply is used once; give it ``times=N`` to answer N consecutive main requests, or
``times=None`` to answer every main request until the script is changed (a fault that
outlasts any retry policy). When the script is empty a main request gets
``Text(MockProvider.EXHAUSTED_TEXT)`` and is counted in ``mp.unscripted``.

The script can be changed at any time, also while an engine is running:
``mp.add(reply, ...)`` appends, ``mp.replace([...])`` swaps the remaining script.
``mp.wait_for(predicate, timeout)`` blocks until ``predicate(mp.requests)`` holds, which lets a
test steer or cancel once a given request has arrived.

Main versus auxiliary requests
------------------------------
Engines also send side requests, which must get a harmless answer and must not consume the
script. Observed with the pinned versions in headless mode: Claude Code sends ``HEAD /api/hello``
(a connectivity probe, unless ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``) and no model side
calls; Qwen Code sends a memory-extraction request after each turn (unless
``memory.enableManagedAutoMemory`` is false); Codex sent none. Side calls without tools (title or
topic generation) and one-token quota probes were not seen here but are covered by rule 4. The
rule, checked in this order:

1. a ``classify`` callable given to ``MockProvider`` decides, if it returns non-None;
2. a system prompt containing one of ``AUXILIARY_SIGNATURES`` makes it auxiliary (Qwen's
   memory-extraction subagent advertises tools and replays the whole conversation, so only its
   system prompt tells it apart);
3. if ``marker`` is set, a request is main iff the marker text occurs in the *first* user
   message of the conversation (put the marker in the test's prompt);
4. otherwise a request is main iff it advertises tools (every agent loop does) and is not a
   one-token probe (``max_tokens``/``max_output_tokens`` <= 1).

Auxiliary requests get ``Text(auxiliary_text)`` (default ``"ok"``).

Recording
---------
``mp.requests`` lists a ``RecordedRequest`` per HTTP request: method, path, query, lowercase
headers, parsed JSON body, API (``"responses"``, ``"messages"``, ``"chat"`` or ``"other"``),
role (``"main"``/``"auxiliary"``/``"other"``) and the reply it was given. Helpers:
``mp.main_requests()``, ``mp.auxiliary_requests()``, ``RecordedRequest.tool_results()`` (the
tool outputs in the request's history, oldest first, as ``ToolResult(call_id, output)``) and
``RecordedRequest.text()`` (all message text in the request, for "did the prompt arrive").

Usage::

    with MockProvider([ToolCall("Bash", {"command": "echo hi"}), Text("all done")]) as mp:
        env["ANTHROPIC_BASE_URL"] = mp.url          # Codex/Qwen: mp.url + "/v1"
        run_claude(env)
        assert mp.main_requests()[1].tool_results()[0].output.strip() == "hi"
        assert mp.main_requests()[0].headers["x-api-key"] == "planted-key"

Pure standard library: one ``ThreadingHTTPServer`` on 127.0.0.1 (ephemeral port by default) in a
background thread.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "Dynamic",
    "Fault",
    "MockProvider",
    "RecordedRequest",
    "Reply",
    "Text",
    "ToolCall",
    "ToolResult",
]


# --------------------------------------------------------------------------- script entries


@dataclass
class Text:
    """A plain assistant answer. ``seconds`` > 0 spreads its deltas over that many seconds."""

    text: str
    seconds: float = 0.0
    times: int | None = 1


@dataclass
class ToolCall:
    """One tool call by exact tool name, with JSON arguments (or a string for custom tools)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    namespace: str | None = None
    call_id: str | None = None
    text_before: str = ""
    times: int | None = 1


@dataclass
class Fault:
    """A failure instead of an answer. Build with the class methods."""

    kind: str  # http | malformed | cut | silent_after_headers | silent_before_headers
    status: int = 200
    retry_after: str | None = None
    message: str | None = None
    abort: bool = False
    times: int | None = 1

    @classmethod
    def http(
        cls,
        status: int,
        *,
        retry_after: float | str | None = None,
        message: str | None = None,
        times: int | None = 1,
    ) -> Fault:
        value = None if retry_after is None else str(retry_after)
        return cls("http", status=status, retry_after=value, message=message, times=times)

    @classmethod
    def malformed(cls, *, times: int | None = 1) -> Fault:
        return cls("malformed", times=times)

    @classmethod
    def cut(cls, *, abort: bool = False, times: int | None = 1) -> Fault:
        return cls("cut", abort=abort, times=times)

    @classmethod
    def silent_after_headers(cls, *, times: int | None = 1) -> Fault:
        return cls("silent_after_headers", times=times)

    @classmethod
    def silent_before_headers(cls, *, times: int | None = 1) -> Fault:
        return cls("silent_before_headers", times=times)


@dataclass
class Dynamic:
    """A reply computed from the request it answers, e.g. to reuse an id from a tool result."""

    build: Callable[[RecordedRequest], Text | ToolCall | Fault]
    times: int | None = 1


Reply = Text | ToolCall | Fault | Dynamic


# --------------------------------------------------------------------------- recording


@dataclass
class ToolResult:
    call_id: str
    output: str


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    api: str  # responses | messages | chat | other
    role: str = "other"  # main | auxiliary | other
    reply: Reply | None = None
    received_at: float = 0.0

    def messages(self) -> list[dict[str, Any]]:
        """The conversation items of the request, whatever the API calls them."""
        if not isinstance(self.body, dict):
            return []
        items = self.body.get("input") if self.api == "responses" else self.body.get("messages")
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return [item for item in items or [] if isinstance(item, dict)]

    def tool_results(self) -> list[ToolResult]:
        """Tool outputs the engine sent back in this request, oldest first."""
        results: list[ToolResult] = []
        for item in self.messages():
            if self.api == "responses":
                if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                    results.append(
                        ToolResult(item.get("call_id", ""), _flatten(item.get("output")))
                    )
            elif self.api == "messages":
                content = item.get("content")
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        results.append(
                            ToolResult(block.get("tool_use_id", ""), _flatten(block.get("content")))
                        )
            elif self.api == "chat" and item.get("role") == "tool":
                results.append(
                    ToolResult(item.get("tool_call_id", ""), _flatten(item.get("content")))
                )
        return results

    def text(self) -> str:
        """All text in system prompt and messages, joined; for substring assertions."""
        parts: list[str] = []
        if isinstance(self.body, dict):
            parts.append(_flatten(self.body.get("system")))
            parts.append(_flatten(self.body.get("instructions")))
        for item in self.messages():
            parts.append(_flatten(item.get("content")))
            if "output" in item:
                parts.append(_flatten(item.get("output")))
        return "\n".join(part for part in parts if part)

    def system_text(self) -> str:
        """The system prompt / instructions, whatever the API calls them."""
        if not isinstance(self.body, dict):
            return ""
        parts = [_flatten(self.body.get("system")), _flatten(self.body.get("instructions"))]
        parts += [
            _flatten(m.get("content"))
            for m in self.messages()
            if m.get("role") in ("system", "developer")
        ]
        return "\n".join(part for part in parts if part)

    def first_user_text(self) -> str:
        for item in self.messages():
            if item.get("role") == "user":
                return _flatten(item.get("content"))
        return ""

    def tool_names(self) -> list[str]:
        """Names of the tools the request advertised (namespaced Codex tools as ``ns/name``)."""
        return [name for name, _ in _advertised_tools(self.body)]


def _flatten(value: Any) -> str:
    """Collapse the many shapes of message content (str, blocks, parts) into plain text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_flatten(part) for part in value)
    if isinstance(value, dict):
        for key in ("text", "content", "output", "input_text"):
            if key in value:
                return _flatten(value[key])
        return ""
    return str(value)


def _advertised_tools(body: Any) -> list[tuple[str, dict[str, Any]]]:
    tools = body.get("tools") if isinstance(body, dict) else None
    found: list[tuple[str, dict[str, Any]]] = []
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict):
                    found.append((f"{tool.get('name')}/{inner.get('name')}", inner))
            continue
        name = tool.get("name") or (tool.get("function") or {}).get("name") or tool.get("type")
        found.append((str(name), tool))
    return found


# --------------------------------------------------------------------------- the server

# Side calls that advertise tools, recognised by their system prompt.
AUXILIARY_SIGNATURES = (
    "managed memory extraction subagent",  # Qwen Code, after each turn, unless disabled
)


class _SilentClose(Exception):
    """Raised inside a handler to end the exchange without writing anything more."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Engines drop connections (cancel, retry, exit); that is not a server error.
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class MockProvider:
    """Scripted loopback model server; see the module docstring."""

    EXHAUSTED_TEXT = "mock provider: no scripted reply left"

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        marker: str | None = None,
        classify: Callable[[RecordedRequest], str | None] | None = None,
        auxiliary_text: str = "ok",
        model_name: str = "mock-model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._script: list[Reply] = list(script)
        self._uses: dict[int, int] = {}
        self.marker = marker
        self.classify = classify
        self.auxiliary_text = auxiliary_text
        self.model_name = model_name
        self.requests: list[RecordedRequest] = []
        # Sent on every successful answer, e.g. Codex's x-codex-primary-used-percent quota headers.
        self.response_headers: dict[str, str] = {}
        self.unscripted = 0
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._server = _Server((host, port), _Handler)
        self._server.provider = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    # ----- lifecycle

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """Base URL without ``/v1`` (Claude); Codex and Qwen want ``url + "/v1"``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MockProvider:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="mock-provider", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; connections held silent are released."""
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> MockProvider:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----- script

    def add(self, *replies: Reply) -> None:
        with self._changed:
            self._script.extend(replies)

    def replace(self, replies: Iterable[Reply]) -> None:
        with self._changed:
            self._script = list(replies)
            self._uses.clear()

    @property
    def remaining(self) -> list[Reply]:
        with self._changed:
            return list(self._script)

    def _take_reply(self) -> Reply:
        with self._changed:
            if not self._script:
                self.unscripted += 1
                return Text(self.EXHAUSTED_TEXT)
            reply = self._script[0]
            used = self._uses.get(id(reply), 0) + 1
            if reply.times is not None and used >= reply.times:
                self._script.pop(0)
                self._uses.pop(id(reply), None)
            else:
                self._uses[id(reply)] = used
            return reply

    # ----- observation

    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.role == "main"]

    def auxiliary_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.role == "auxiliary"]

    def wait_for(
        self, predicate: Callable[[list[RecordedRequest]], bool], timeout: float = 30.0
    ) -> bool:
        """Block until ``predicate(requests)`` is true; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self.requests)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def _record(self, request: RecordedRequest) -> None:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()

    def _role_of(self, request: RecordedRequest) -> str:
        if self.classify is not None:
            verdict = self.classify(request)
            if verdict is not None:
                return verdict
        system = request.system_text()
        if any(signature in system for signature in AUXILIARY_SIGNATURES):
            return "auxiliary"
        if self.marker is not None:
            return "main" if self.marker in request.first_user_text() else "auxiliary"
        body = request.body if isinstance(request.body, dict) else {}
        limit = body.get("max_tokens", body.get("max_output_tokens"))
        if isinstance(limit, int) and limit <= 1:
            return "auxiliary"
        return "main" if body.get("tools") else "auxiliary"


# --------------------------------------------------------------------------- wire formats


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _chunks(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _arguments_json(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "MockProvider/1"

    # quiet: the test output is ours
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    @property
    def provider(self) -> MockProvider:
        return self.server.provider  # type: ignore[attr-defined]

    # ----- entry points

    def do_GET(self) -> None:
        request = self._read_request()
        if request.path.rstrip("/").endswith("/models"):
            models = [
                {
                    "id": self.provider.model_name,
                    "object": "model",
                    "owned_by": "mock",
                    "created": 0,
                }
            ]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self) -> None:
        request = self._read_request()
        try:
            if request.api == "other":
                if request.path.endswith("/count_tokens"):
                    self._send_json(200, {"input_tokens": _estimate_tokens(request.body)})
                else:
                    self._send_json(200, {})
                return
            reply = self._choose_reply(request)
            self._answer(request, reply)
        except (BrokenPipeError, ConnectionResetError, _SilentClose):
            self.close_connection = True

    def do_HEAD(self) -> None:
        self._read_request()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    # ----- request side

    def _read_request(self) -> RecordedRequest:
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = split.path
        if path.endswith("/responses"):
            api = "responses"
        elif path.endswith("/messages"):
            api = "messages"
        elif path.endswith("/chat/completions"):
            api = "chat"
        else:
            api = "other"
        request = RecordedRequest(
            method=self.command,
            path=path,
            query=parse_qs(split.query),
            headers={key.lower(): value for key, value in self.headers.items()},
            body=body,
            api=api,
            received_at=time.time(),
        )
        if api != "other":
            request.role = self.provider._role_of(request)
        self.provider._record(request)
        return request

    def _choose_reply(self, request: RecordedRequest) -> Reply:
        if request.role == "main":
            reply = self.provider._take_reply()
            if isinstance(reply, Dynamic):
                reply = reply.build(request)
        else:
            reply = Text(self.provider.auxiliary_text)
        request.reply = reply
        return reply

    def _wants_stream(self, request: RecordedRequest) -> bool:
        body = request.body if isinstance(request.body, dict) else {}
        return bool(body.get("stream")) or request.api == "responses"

    # ----- reply side

    def _answer(self, request: RecordedRequest, reply: Reply) -> None:
        if isinstance(reply, Fault):
            self._fault(request, reply)
            return
        builder = {"responses": _ResponsesStream, "messages": _MessagesStream, "chat": _ChatStream}[
            request.api
        ](request, self.provider.model_name)
        if not self._wants_stream(request):
            self._send_json(200, builder.whole(reply), self.provider.response_headers)
            return
        self._start_stream()
        events = list(builder.events(reply))
        pause = reply.seconds / max(len(events), 1) if isinstance(reply, Text) else 0.0
        for event in events:
            self._send_event(event)
            if pause and self.provider._stopping.wait(pause):
                raise _SilentClose
        self._end_stream()

    def _fault(self, request: RecordedRequest, fault: Fault) -> None:
        stopping = self.provider._stopping
        if fault.kind == "http":
            headers = {"retry-after": fault.retry_after} if fault.retry_after else {}
            self._send_json(fault.status, _error_body(request.api, fault), headers)
            return
        if fault.kind == "silent_before_headers":
            stopping.wait()
            raise _SilentClose
        if not self._wants_stream(request) and fault.kind in ("malformed", "cut"):
            self._broken_json(fault)
            return
        self._start_stream()
        if fault.kind == "silent_after_headers":
            stopping.wait()
            raise _SilentClose
        builder = {"responses": _ResponsesStream, "messages": _MessagesStream, "chat": _ChatStream}[
            request.api
        ](request, self.provider.model_name)
        opening = list(builder.events(Text("partial answer that never finishes")))
        if fault.kind == "malformed":
            self._send_event(opening[0])
            self._write_chunk(b"data: {this is not json\n\n")
            self._end_stream()
            return
        if fault.kind == "cut":
            for event in opening[: builder.events_before_terminal(opening)]:
                self._send_event(event)
            if fault.abort:
                self.connection.shutdown(socket.SHUT_RDWR)
                raise _SilentClose
            self._end_stream()
            return
        raise ValueError(f"unknown fault {fault.kind!r}")

    def _broken_json(self, fault: Fault) -> None:
        """Non-streaming flavour of malformed/cut: bad JSON, or a body shorter than announced."""
        data = b'{"id": "broken", "content": [{"type": "text", "text": "never fini'
        if fault.kind == "malformed":
            data = b"{this is not json}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) * (2 if fault.kind == "cut" else 1)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if fault.kind == "cut":
            self.connection.shutdown(socket.SHUT_RDWR)
            raise _SilentClose

    # ----- low-level writing (HTTP/1.1, chunked for streams)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for key, value in self.provider.response_headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_event(self, event: tuple[str | None, Any]) -> None:
        name, data = event
        text = data if isinstance(data, str) else json.dumps(data)
        line = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
        self._write_chunk(line.encode())

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _estimate_tokens(body: Any) -> int:
    return max(1, len(json.dumps(body)) // 4)


def _error_body(api: str, fault: Fault) -> dict[str, Any]:
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
        500: "api_error",
        529: "overloaded_error",
    }
    kind = kinds.get(fault.status, "api_error")
    message = fault.message or f"mock provider fault: HTTP {fault.status} ({kind})"
    if api == "messages":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "code": kind, "param": None}}


# --------------------------------------------------------------------------- per-API builders
# Each builder turns a Text or ToolCall into the API's SSE events ((event name, data) pairs)
# or into a whole non-streaming response body.


class _ResponsesStream:
    """OpenAI Responses API (Codex)."""

    def __init__(self, request: RecordedRequest, model: str) -> None:
        self.request = request
        self.model = (request.body or {}).get("model") or model
        self.response_id = _new_id("resp")

    def _response(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        usage = {
            "input_tokens": _estimate_tokens(self.request.body),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": int(time.time()),
            "model": self.model,
            "status": status,
            "output": output,
            "usage": usage if status == "completed" else None,
        }

    def _tool_item(self, call: ToolCall) -> dict[str, Any]:
        name, namespace = call.name, call.namespace
        advertised = dict(_advertised_tools(self.request.body))
        if namespace is None and name not in advertised and name.startswith("mcp__"):
            # Codex calls MCP tools as function `finish` in namespace `mcp__worker`; the tool
            # is usually deferred behind tool_search (not advertised), yet a direct call works.
            namespace, _, name = name.rpartition("__")
        spec = advertised.get(f"{namespace}/{name}" if namespace else name, {})
        call_id = call.call_id or _new_id("call")
        if spec.get("type") == "custom":
            text = (
                call.arguments
                if isinstance(call.arguments, str)
                else str(call.arguments.get("input", ""))
            )
            item = {
                "type": "custom_tool_call",
                "id": _new_id("ctc"),
                "call_id": call_id,
                "name": name,
                "input": text,
                "status": "completed",
            }
        else:
            item = {
                "type": "function_call",
                "id": _new_id("fc"),
                "call_id": call_id,
                "name": name,
                "arguments": _arguments_json(call),
                "status": "completed",
            }
        if namespace:
            item["namespace"] = namespace
        return item

    @staticmethod
    def _message_item(item_id: str, text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def events(self, reply: Text | ToolCall) -> Iterator[tuple[str, Any]]:
        def event(kind: str, **data: Any) -> tuple[str, Any]:
            return kind, {"type": kind, **data}

        yield event("response.created", response=self._response("in_progress", []))
        output: list[dict[str, Any]] = []
        text = reply.text if isinstance(reply, Text) else reply.text_before
        if text:
            item_id = _new_id("msg")
            index = len(output)
            added = {
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            yield event("response.output_item.added", output_index=index, item=added)
            yield event(
                "response.content_part.added",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )
            for piece in _chunks(text):
                yield event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    delta=piece,
                )
            yield event(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=text,
            )
            done = self._message_item(item_id, text)
            yield event("response.output_item.done", output_index=index, item=done)
            output.append(done)
        if isinstance(reply, ToolCall):
            item = self._tool_item(reply)
            index = len(output)
            pending = dict(item, status="in_progress")
            if "arguments" in pending:
                pending["arguments"] = ""
            yield event("response.output_item.added", output_index=index, item=pending)
            if item["type"] == "function_call":
                yield event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=item["arguments"],
                )
                yield event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            yield event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        yield event("response.completed", response=self._response("completed", output))

    @staticmethod
    def events_before_terminal(events: list[tuple[str, Any]]) -> int:
        return len(events) - 1

    def whole(self, reply: Text | ToolCall) -> dict[str, Any]:
        return list(self.events(reply))[-1][1]["response"]


class _MessagesStream:
    """Anthropic Messages API (Claude Code)."""

    def __init__(self, request: RecordedRequest, model: str) -> None:
        self.request = request
        self.model = (request.body or {}).get("model") or model
        self.message_id = _new_id("msg")

    def _usage(self) -> dict[str, int]:
        return {
            "input_tokens": _estimate_tokens(self.request.body),
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }

    def _blocks(self, reply: Text | ToolCall) -> list[dict[str, Any]]:
        text = reply.text if isinstance(reply, Text) else reply.text_before
        blocks: list[dict[str, Any]] = []
        if text:
            blocks.append({"type": "text", "text": text})
        if isinstance(reply, ToolCall):
            arguments = (
                reply.arguments
                if isinstance(reply.arguments, dict)
                else json.loads(reply.arguments)
            )
            blocks.append(
                {
                    "type": "tool_use",
                    "id": reply.call_id or _new_id("toolu"),
                    "name": reply.name,
                    "input": arguments,
                }
            )
        return blocks

    def events(self, reply: Text | ToolCall) -> Iterator[tuple[str, Any]]:
        stop_reason = "tool_use" if isinstance(reply, ToolCall) else "end_turn"
        start = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": dict(self._usage(), output_tokens=1),
        }
        yield "message_start", {"type": "message_start", "message": start}
        yield "ping", {"type": "ping"}
        for index, block in enumerate(self._blocks(reply)):
            if block["type"] == "text":
                yield (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                for piece in _chunks(block["text"]):
                    yield (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
            else:
                opening = dict(block, input={})
                yield (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": opening},
                )
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {
                            "type": "input_json_delta",
                            "partial_json": json.dumps(block["input"]),
                        },
                    },
                )
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        yield "message_stop", {"type": "message_stop"}

    @staticmethod
    def events_before_terminal(events: list[tuple[str, Any]]) -> int:
        # stop before the content_block_stop / message_delta / message_stop tail
        return len(events) - 3

    def whole(self, reply: Text | ToolCall) -> dict[str, Any]:
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self._blocks(reply),
            "stop_reason": "tool_use" if isinstance(reply, ToolCall) else "end_turn",
            "stop_sequence": None,
            "usage": self._usage(),
        }


class _ChatStream:
    """OpenAI Chat Completions (Qwen Code)."""

    def __init__(self, request: RecordedRequest, model: str) -> None:
        self.request = request
        self.model = (request.body or {}).get("model") or model
        self.completion_id = _new_id("chatcmpl")
        self.created = int(time.time())

    def _usage(self) -> dict[str, int]:
        prompt = _estimate_tokens(self.request.body)
        return {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def _tool_calls(self, call: ToolCall) -> list[dict[str, Any]]:
        return [
            {
                "index": 0,
                "id": call.call_id or _new_id("call"),
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments_json(call)},
            }
        ]

    def events(self, reply: Text | ToolCall) -> Iterator[tuple[None, Any]]:
        yield None, self._chunk({"role": "assistant", "content": ""})
        text = reply.text if isinstance(reply, Text) else reply.text_before
        for piece in _chunks(text) if text else []:
            yield None, self._chunk({"content": piece})
        if isinstance(reply, ToolCall):
            yield None, self._chunk({"tool_calls": self._tool_calls(reply)})
        yield None, self._chunk({}, "tool_calls" if isinstance(reply, ToolCall) else "stop")
        options = (self.request.body or {}).get("stream_options") or {}
        if options.get("include_usage"):
            yield None, dict(self._chunk({}), choices=[], usage=self._usage())
        yield None, "[DONE]"

    @staticmethod
    def events_before_terminal(events: list[tuple[None, Any]]) -> int:
        # everything up to (not including) the chunk that carries finish_reason
        for index, (_, data) in enumerate(events):
            if isinstance(data, dict) and any(c.get("finish_reason") for c in data["choices"]):
                return index
        return len(events) - 1

    def whole(self, reply: Text | ToolCall) -> dict[str, Any]:
        text = reply.text if isinstance(reply, Text) else reply.text_before
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if isinstance(reply, ToolCall):
            message["tool_calls"] = [
                {key: value for key, value in call.items() if key != "index"}
                for call in self._tool_calls(reply)
            ]
        return {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if isinstance(reply, ToolCall) else "stop",
                }
            ],
            "usage": self._usage(),
        }
