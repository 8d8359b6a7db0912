"""The per-execution credential broker: a loopback HTTP endpoint that holds the provider key.

The engine is pointed at `http://127.0.0.1:PORT` with a random per-execution token in place
of the key. Each request must carry the token (as `x-api-key` or `Authorization: Bearer`, the
header the engine uses), or it gets 401; the broker swaps in the real key in that same header
and forwards the request to the configured upstream (https, or plain http to loopback), through
`HTTPS_PROXY` / `HTTP_PROXY` unless `NO_PROXY` or a loopback upstream says otherwise. The
response streams back as it arrives (SSE included), re-chunked. The key lives only in this
process's memory; the token dies with the execution (`close`). Responses' rate-limit headers
are queued as provider signals for the supervisor to record.
"""

import hmac
import http.client
import json
import queue
import secrets
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent_run.supervisor.upstream import Upstream

TOKEN_PREFIX = "agent-run-broker-"
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}
_SIGNAL_HEADERS = ("x-ratelimit-", "anthropic-ratelimit-", "ratelimit-", "retry-after")
READ_BYTES = 65536


class CredentialBroker:
    def __init__(self, upstream_url: str, key: str) -> None:
        self.upstream = Upstream(upstream_url)
        self.key = key
        self.token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.signals: queue.SimpleQueue[tuple[int, float | None, str]] = queue.SimpleQueue()
        self.upstream_failures: queue.SimpleQueue[str] = queue.SimpleQueue()
        # Why the latest request could not reach the upstream; None once one did.
        self.unreachable: str | None = None
        self.server = _Server(("127.0.0.1", 0), _BrokerHandler)
        self.server.broker = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.2},
            daemon=True,
            name="credential-broker",
        )

    def start(self) -> "CredentialBroker":
        self.thread.start()
        return self

    @property
    def base_url(self) -> str:
        """What the engine is given instead of the upstream: the same path, on the broker."""
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}{self.upstream.path.rstrip('/')}"

    def close(self) -> None:
        """Stop accepting; the token is forgotten with the key."""
        self.server.shutdown()
        self.server.server_close()
        self.key = self.token = ""

    def accepts(self, credential: str) -> bool:
        return bool(self.token) and hmac.compare_digest(credential.encode(), self.token.encode())

    def note_response(self, status: int, headers: http.client.HTTPMessage) -> None:
        seen = {k.lower(): v for k, v in headers.items() if k.lower().startswith(_SIGNAL_HEADERS)}
        if not seen and status != 429:
            return
        try:
            retry_after = float(seen["retry-after"]) if "retry-after" in seen else None
        except ValueError:
            retry_after = None
        self.signals.put((status, retry_after, json.dumps(seen, sort_keys=True)))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # an engine that hangs up is not an error worth a traceback in supervisor.log


class _BrokerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agent-run-broker"
    # TCP_NODELAY on the engine's connection: a reply is its headers, then each chunk as it
    # arrives, and Nagle held the first chunk until the engine's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True
    upstream_conn: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - nothing on stderr
        pass

    @property
    def broker(self) -> CredentialBroker:
        return self.server.broker  # type: ignore[attr-defined]

    def do_POST(self) -> None:
        self._forward()

    do_GET = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_POST

    def _forward(self) -> None:
        headers = self._upstream_headers()
        body = self._read_body()
        if headers is None:
            self._reply_error(401, "authentication_error", "missing or wrong token")
            return
        if not self.path.startswith("/"):  # an absolute-form target would name another host
            self._reply_error(400, "invalid_request_error", "the request target must be a path")
            return
        try:
            response = self._send_upstream(headers, body)
        except OSError as exc:
            self.broker.unreachable = f"{type(exc).__name__}: {exc}"
            self.broker.upstream_failures.put(self.broker.unreachable)
            self._abort()
            return
        self.broker.unreachable = None
        self.broker.note_response(response.status, response.headers)
        self._relay(response)

    def _upstream_headers(self) -> dict[str, str] | None:
        """The request's headers with the token swapped for the key; None without the token."""
        out: dict[str, str] = {}
        authorized = False
        for name, value in self.headers.items():
            lower = name.lower()
            if lower in _HOP_BY_HOP:
                continue
            if lower == "x-api-key" and self.broker.accepts(value.strip()):
                value, authorized = self.broker.key, True
            elif (
                lower == "authorization"
                and value.startswith("Bearer ")
                and self.broker.accepts(value[7:].strip())
            ):
                value, authorized = f"Bearer {self.broker.key}", True
            out[name] = value
        out["Host"] = self.broker.upstream.host_header
        out.update(self.broker.upstream.extra_headers)
        return out if authorized else None

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_upstream(self, headers: dict[str, str], body: bytes) -> http.client.HTTPResponse:
        if body or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        reused = self.upstream_conn is not None
        for attempt in (0, 1):
            if self.upstream_conn is None:
                self.upstream_conn = self.broker.upstream.connect()
            try:
                if self.upstream_conn.sock is None:  # headers and body are two writes: no Nagle
                    self.upstream_conn.connect()
                    self.upstream_conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.upstream_conn.request(
                    self.command, self.broker.upstream.target(self.path), body=body, headers=headers
                )
                return self.upstream_conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_upstream()
                if not reused or attempt:  # a kept-alive connection the upstream had closed
                    raise
        raise AssertionError("the retry loop always returns or raises")

    def _relay(self, response: http.client.HTTPResponse) -> None:
        self.send_response_only(response.status, response.reason)
        for name, value in response.headers.items():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        bodyless = (
            self.command == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        )
        chunked = not bodyless and response.length is None
        if bodyless:
            self.send_header("Content-Length", response.headers.get("Content-Length", "0"))
        elif chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(response.length))
        if response.will_close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.flush()
        if bodyless:
            response.close()
            return
        self._stream(response, chunked)

    def _stream(self, response: http.client.HTTPResponse, chunked: bool) -> None:
        try:
            while True:
                data = response.read1(READ_BYTES)
                if not data:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                self.wfile.flush()
            if not chunked and response.length:  # read1 ends early instead of raising
                raise http.client.IncompleteRead(b"", response.length)
        except (http.client.IncompleteRead, OSError):
            self._drop_upstream()
            self._abort()  # the upstream cut its stream: so does the engine's
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        # Mark the response done: read1 leaves a Content-Length body open at its end, and a
        # kept-alive upstream connection refuses its next request (ResponseNotReady) until then.
        response.close()
        if response.will_close:
            self._drop_upstream()

    def _reply_error(self, status: int, kind: str, message: str) -> None:
        data = json.dumps(
            {
                "type": "error",
                "error": {"type": kind, "message": f"agent-run credential broker: {message}"},
            }
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _abort(self) -> None:
        """Drop the engine's connection without a (complete) response, as the upstream did."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _drop_upstream(self) -> None:
        if self.upstream_conn is not None:
            self.upstream_conn.close()
            self.upstream_conn = None

    def finish(self) -> None:
        self._drop_upstream()
        super().finish()
