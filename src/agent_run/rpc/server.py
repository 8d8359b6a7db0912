"""The daemon: one per home (a lock), a 0600 socket, JSON-RPC dispatch to the tool table,
the revision watcher and the reconciliation loop."""

import asyncio
import fcntl
import os
import resource
import signal
import socket
import struct
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent_run import __version__
from agent_run.config import load_config
from agent_run.domain.errors import DomainError, InternalError
from agent_run.domain.requests import EmptyParams
from agent_run.domain.views import Pong, ToolsResult
from agent_run.home import MAX_SOCKET_PATH, Home
from agent_run.logs import daemon_logger
from agent_run.rpc import protocol as p
from agent_run.services.context import ServiceContext
from agent_run.services.integrity import scrub_once
from agent_run.services.agents import adopt_orphan
from agent_run.services.reconcile import reconcile_once
from agent_run.store.db import connect, is_storage_full, storage_full
from agent_run.tools import SOCKET_ONLY, TOOLS, Tool, tool_schemas

ALL_TOOLS: dict[str, Tool] = {**TOOLS, **SOCKET_ONLY}
SCRUB_TICK_SECONDS = 10.0


class DaemonAlreadyRunning(Exception):
    pass


async def ping(ctx: ServiceContext, _p: EmptyParams) -> Pong:
    return Pong(version=__version__, pid=os.getpid(), home=str(ctx.home.root), parked=ctx.watcher.parked)


async def list_tools(_ctx: ServiceContext, _p: EmptyParams) -> ToolsResult:
    return ToolsResult(tools=tool_schemas())


def acquire_lock(home: Home) -> int:
    """Hold the home's daemon lock for this process's life; the kernel drops it when we die."""
    fd = os.open(home.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode().strip() or "unknown"
        os.close(fd)
        raise DaemonAlreadyRunning(f"a daemon already serves {home.root} (pid {holder})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit and return it: every MCP host, long-poll
    client and spawn holds descriptors, and the usual soft default (1,024) is arbitrary."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel still caps a process at fs.nr_open
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            return soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


class Daemon:
    def __init__(self, home: Home) -> None:
        self.home = home.ensure()
        self.log = daemon_logger(home)
        self.config = load_config(home)  # fail closed before anything is bound
        self.ctx = ServiceContext(home, self.config, log=self.log)
        self.tools = {name: (tool, tool.resolve()) for name, tool in ALL_TOOLS.items()}

    async def serve(self) -> None:
        if len(str(self.home.socket_path)) > MAX_SOCKET_PATH:
            raise SystemExit(f"socket path {self.home.socket_path} is longer than {MAX_SOCKET_PATH} "
                             "bytes; choose a shorter --home")
        lock_fd = acquire_lock(self.home)
        fd_limit = raise_fd_limit()
        connect(self.home.db_path).close()  # migrate once, before serving
        self.ctx.warm_up()
        # We hold the lock, so any socket file left behind belongs to a dead daemon.
        self.home.socket_path.unlink(missing_ok=True)
        old_umask = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(self._connection, path=str(self.home.socket_path),
                                                     limit=p.MAX_LINE_BYTES, backlog=socket.SOMAXCONN)
        finally:
            os.umask(old_umask)
        os.chmod(self.home.socket_path, 0o600)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        from agent_run.batches.service import scheduler

        background = [asyncio.create_task(self.ctx.watcher.run()),
                      asyncio.create_task(self._reconcile_loop()),
                      asyncio.create_task(self._scrub_loop()),
                      asyncio.create_task(scheduler(self.ctx).run_forever(self.log))]
        self.log.info("daemon.started", pid=os.getpid(), socket=str(self.home.socket_path), fd_limit=fd_limit)
        async with server:
            await stop.wait()
        self.log.info("daemon.stopping")
        for task in background:
            task.cancel()
        self.home.socket_path.unlink(missing_ok=True)
        self.ctx.shutdown()
        os.close(lock_fd)

    async def _reconcile_loop(self) -> None:
        # The first pass runs at boot: it spawns what a dead daemon admitted but never spawned.
        while True:
            try:
                await self._reconcile()
            except Exception as exc:  # keep reconciling; the next pass may succeed
                self.log.error("reconcile.error", error=repr(exc))
            await asyncio.sleep(self.config.daemon.reconcile_interval_seconds)

    async def _scrub_loop(self) -> None:
        """Re-hash every sealed answer once per `answer_scrub_seconds`, a few per pass."""
        period = self.config.daemon.answer_scrub_seconds
        while True:
            try:
                result = await self.ctx.db(scrub_once, period)
                for execution_id in result.failed:
                    self.log.warning("answer.integrity_failed", execution_id=execution_id, by="scrub")
            except Exception as exc:  # keep scrubbing; the next pass may succeed
                self.log.error("scrub.error", error=repr(exc))
            await asyncio.sleep(max(0.2, min(SCRUB_TICK_SECONDS, period / 20)))

    async def _reconcile(self) -> None:
        done = await self.ctx.db(reconcile_once, self.ctx.starting, self.home)
        for item in done.lost:
            self.log.warning("execution.lost", execution_id=item.execution_id, reason=item.reason)
        for orphan in done.orphans:
            if await adopt_orphan(self.ctx, orphan.agent_id, orphan.execution_id):
                self.log.warning("execution.adopted", execution_id=orphan.execution_id,
                                 reason="admitted but never spawned (its spawner died)")

    # -- connections ------------------------------------------------------------------------

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

        sock = writer.get_extra_info("socket")
        if peer_uid(sock) != os.getuid():
            await send(p.error(None, p.DOMAIN_ERROR, "permission denied",
                               {"code": "PermissionDenied", "message": "peer uid differs from the daemon's"}))
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
            return p.encode(p.error(safe_id, p.INTERNAL_ERROR, f"internal error: unencodable reply ({type(exc).__name__}); "
                                    f"see {self.home.logs_dir / 'daemon.log'}"))

    async def _handle_line(self, line: bytes, send: Any) -> None:
        try:
            message = p.decode(line)
        except p.BadMessage as exc:
            await send(exc.reply())
            return
        if not isinstance(message, dict):
            await send(p.error(None, p.INVALID_REQUEST, "a request must be a JSON object (batches are not supported)"))
            return
        request_id = message.get("id")
        if not isinstance(request_id, (str, int, float, type(None))) or isinstance(request_id, bool):
            await send(p.error(None, p.INVALID_REQUEST, "invalid request: `id` must be a string, a number or null"))
            return
        is_notification = "id" not in message
        if message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
            await send(p.error(request_id, p.INVALID_REQUEST,
                               'invalid request: need "jsonrpc": "2.0" and a string "method"'))
            return
        try:
            reply = await self._dispatch(request_id, message["method"], message.get("params"))
        except Exception as exc:  # a bug outside the handler: still answer, typed
            self.log.exception("rpc.internal_error", method=message["method"][:100])
            reply = self._internal_error(request_id, exc)
        if not is_notification:
            await send(reply)

    def _internal_error(self, request_id: Any, exc: BaseException) -> dict[str, Any]:
        message = f"internal error: {exc!r}"
        data = InternalError(message, rpc_code=p.INTERNAL_ERROR, log=str(self.home.logs_dir / "daemon.log"))
        return p.error(request_id, p.INTERNAL_ERROR, message, data.to_data())

    async def _dispatch(self, request_id: Any, method: str, params: Any) -> dict[str, Any]:
        entry = self.tools.get(method)
        if entry is None:
            return p.error(request_id, p.METHOD_NOT_FOUND, f"method not found: {method}")
        tool, handler = entry
        asyncio.current_task().read_only = tool.read_only  # type: ignore[union-attr]
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return p.error(request_id, p.INVALID_PARAMS, "params must be an object",
                           {"code": "InvalidParams", "message": "params must be an object", "field": "params"})
        try:
            parsed = tool.params.model_validate(params)
        except ValidationError as exc:
            data = p.validation_error_data(exc)
            return p.error(request_id, p.INVALID_PARAMS, f"invalid params: {data['message']}", data)
        try:
            result = await handler(self.ctx, parsed)
        except DomainError as exc:
            return p.error(request_id, p.DOMAIN_ERROR, exc.message, exc.to_data())
        except Exception as exc:
            if is_storage_full(exc):  # a write outside store.db.write (a file, a directory)
                full = storage_full(f"what `{method}` needed to store", exc)
                return p.error(request_id, p.DOMAIN_ERROR, full.message, full.to_data())
            self.log.exception("rpc.internal_error", method=method)
            return self._internal_error(request_id, exc)
        return p.response(request_id, result.model_dump(mode="json"))


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


def serve_forever(home: Home) -> None:
    os.umask(0o077)
    asyncio.run(Daemon(home).serve())
