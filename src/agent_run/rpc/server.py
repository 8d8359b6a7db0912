"""The socket transport: a 0600 Unix socket, JSON-RPC 2.0 lines, one asyncio task per request
line, the peer-uid check, and typed answers to every line however hostile.

It knows no tool, store or service: it serves a table of `Endpoint`s (built by `daemon.py`)
and maps what they raise to JSON-RPC errors: a `DomainError` by its class (`protocol.rpc_code`),
an `RpcFailure` as given, anything else as -32603 pointing at the daemon log.
"""

import asyncio
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_run.domain.errors import (
    DomainError,
    InternalError,
    MalformedRequest,
    MethodNotFound,
    PermissionDenied,
)
from agent_run.rpc import protocol as p
from agent_run.system import unix_sockets
from agent_run.system.processes import current as current_processes

Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Endpoint:
    """One method: `call(params)` takes the request's params (any JSON) and returns JSON-able
    data; `read_only` requests are cancelled when their client leaves."""

    read_only: bool
    call: Callable[[Any], Awaitable[Any]]


def peer_uid(sock: socket.socket) -> int:
    return current_processes().peer_credentials(sock).uid


class RpcServer:
    def __init__(
        self, socket_path: Path, endpoints: Mapping[str, Endpoint], log: Any, log_path: Path
    ) -> None:
        self.socket_path, self.endpoints, self.log, self.log_path = (
            socket_path,
            endpoints,
            log,
            log_path,
        )

    async def start(self) -> asyncio.AbstractServer:
        """Listen (replacing a stale socket file: the caller holds the home's lock). The socket
        is bound by `unix_sockets` (a home of any length; 0600 before it listens) and handed to
        asyncio. Python 3.13+ would stat, and at close unlink, the address it was bound at,
        `/proc/self/fd/N/api.sock`, whose N is closed by then (NotADirectoryError when N is
        reused for a file): so not there; the daemon removes the socket itself."""
        self.socket_path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            unix_sockets.bind(sock, self.socket_path)
        except BaseException:
            sock.close()
            raise
        keep = {"cleanup_socket": False} if sys.version_info >= (3, 13) else {}
        return await asyncio.start_unix_server(
            self._connection,
            sock=sock,
            limit=p.MAX_LINE_BYTES,
            backlog=socket.SOMAXCONN,
            **keep,
        )

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        write_lock = asyncio.Lock()
        pending: set[asyncio.Task[None]] = set()

        async def send(message: dict[str, Any]) -> None:
            async with write_lock:
                try:
                    writer.write(self._encode_reply(message))
                    await writer.drain()
                except (ConnectionError, RuntimeError):
                    pass  # the client left; its answer has nowhere to go

        if peer_uid(writer.get_extra_info("socket")) != os.getuid():
            await send(
                p.typed_error(
                    None, p.DOMAIN_ERROR, PermissionDenied("peer uid differs from the daemon's")
                )
            )
            writer.close()
            return
        try:
            while True:
                try:
                    line = await read_line(reader)
                except ConnectionError:
                    break
                if line is None:  # over the limit: answered, discarded, and the connection goes on
                    await send(p.line_too_long())
                    continue
                if not line:
                    break
                if not line.strip():
                    continue
                task = asyncio.create_task(self._handle_line(line, send))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            # A client that left cancels its reads (e.g. a wait); writes run to completion.
            for task in pending:
                if getattr(task, "read_only", False):
                    task.cancel()
            writer.close()

    def _encode_reply(self, message: dict[str, Any]) -> bytes:
        """The reply line; a reply that cannot be encoded (a bug) becomes a -32603 that can."""
        try:
            return p.encode(message)
        except (ValueError, TypeError, RecursionError) as exc:
            self.log.error("rpc.unencodable_reply", error=repr(exc))
            request_id = message.get("id")
            safe_id = request_id if isinstance(request_id, int) else None
            return p.encode(
                p.error(
                    safe_id,
                    p.INTERNAL_ERROR,
                    f"internal error: unencodable reply "
                    f"({type(exc).__name__}); see {self.log_path}",
                )
            )

    async def _handle_line(self, line: bytes, send: Send) -> None:
        try:
            message = p.decode(line)
        except p.BadMessage as exc:
            await send(exc.reply())
            return
        if not isinstance(message, dict):
            await send(
                _malformed(None, "a request must be a JSON object (batches are not supported)")
            )
            return
        request_id = message.get("id")
        if not isinstance(request_id, (str, int, float, type(None))) or isinstance(
            request_id, bool
        ):
            await send(_malformed(None, "invalid request: `id` must be a string, a number or null"))
            return
        is_notification = "id" not in message
        if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
            await send(
                _malformed(
                    request_id, 'invalid request: need "jsonrpc": "2.0" and a string "method"'
                )
            )
            return
        reply = await self._dispatch(request_id, message["method"], message.get("params"))
        if not is_notification:
            await send(reply)

    async def _dispatch(self, request_id: Any, method: str, params: Any) -> dict[str, Any]:
        endpoint = self.endpoints.get(method)
        if endpoint is None:
            return p.typed_error(
                request_id,
                p.METHOD_NOT_FOUND,
                MethodNotFound(f"method not found: {method[:100]}", field="method"),
            )
        asyncio.current_task().read_only = endpoint.read_only  # type: ignore[union-attr]
        try:
            return p.response(request_id, await endpoint.call(params))
        except p.RpcFailure as exc:
            return p.error(request_id, exc.code, exc.message, exc.data)
        except DomainError as exc:
            return p.typed_error(request_id, p.rpc_code(exc), exc)
        except Exception as exc:  # a bug: still answer, typed, and log it
            self.log.exception("rpc.internal_error", method=method[:100])
            message = f"internal error: {exc!r}"
            data = InternalError(message, rpc_code=p.INTERNAL_ERROR, log=str(self.log_path))
            return p.typed_error(request_id, p.INTERNAL_ERROR, data)


def _malformed(request_id: Any, message: str) -> dict[str, Any]:
    return p.typed_error(request_id, p.INVALID_REQUEST, MalformedRequest(message))


async def read_line(reader: asyncio.StreamReader) -> bytes | None:
    """The next line (b"" at end of stream), or None for a line over the reader's limit, which
    is read to its end and dropped so the next line starts clean."""
    too_long = False
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # end of stream; the next call returns b""
            return None if too_long else exc.partial
        except asyncio.LimitOverrunError as exc:
            too_long = True
            await reader.readexactly(exc.consumed)  # drop it; the newline (if seen) stays
            continue
        return None if too_long else line
