"""One ssh connection to a host's bridge (`ssh HOST agent-run api bridge`): the version check at
connect, then JSON-RPC calls to the host's daemon, many in flight, matched by id.

The framing is the daemon's own (one JSON-RPC 2.0 object per line); an error reply becomes the
typed error it names (`domain.errors.error_from_data`). When the connection ends, every call in
flight fails `HostUnreachable` and the link is closed: the caller opens a new one.
"""

import asyncio
import collections
import itertools
import json
import os
from typing import Any

from agent_run import __version__
from agent_run.config.hosts import HostConfig
from agent_run.domain import errors

READ_LIMIT = 64 * 1024 * 1024  # a reply line (a page of transcript can be large)
DAEMON_READY_SECONDS = 40.0  # the bridge may have to start the host's daemon first
STDERR_LINES = 20


class HostLink:
    """A live connection to one host's daemon, through its bridge."""

    def __init__(self, name: str, config: HostConfig, log: Any = None) -> None:
        self.name = name
        self.config = config
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None
        self.remote_version: str | None = None
        self.remote_daemon: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._write_lock = asyncio.Lock()
        self.closed = asyncio.Event()

    @property
    def ssh_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def connected(self) -> bool:
        return self.proc is not None and not self.closed.is_set()

    def stderr_tail(self) -> str:
        return " | ".join(line for line in self._stderr if line.strip())[-600:]

    def _unreachable(self, why: str) -> errors.HostUnreachable:
        said = self.stderr_tail()
        return errors.HostUnreachable(
            f"host {self.name} ({self.config.ssh}): {why}"
            + (f"; ssh said: {said}" if said else ""),
            field="host",
            host=self.name,
        )

    async def open(self) -> "HostLink":
        """Start ssh, check the bridge's and the daemon's versions; HostUnreachable or
        HostVersionMismatch (after which nothing was started on the host)."""
        argv = self.config.ssh_argv(self.config.agent_run_argv("api", "bridge"))
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=READ_LIMIT,
                start_new_session=True,  # a terminal's ^C to a foreground daemon is not the link's
                env=dict(os.environ),  # HOME, SSH_AUTH_SOCK: the user's own ssh setup
            )
        except OSError as exc:
            raise self._unreachable(f"cannot run ssh: {exc.strerror}") from None
        self._stderr_task = asyncio.get_running_loop().create_task(self._drain_stderr())
        self._tasks.append(self._stderr_task)
        try:
            hello = await self._handshake_line(self.config.connect_timeout_seconds + 5)
            if hello.get("version") != __version__:
                raise errors.HostVersionMismatch(
                    f"host {self.name} runs agent-run {hello.get('version')}, this daemon "
                    f"{__version__}: install the same version on both",
                    field="host",
                    host=self.name,
                    local=__version__,
                    remote=hello.get("version"),
                )
            await self._send({"connect": True})
            ready = await self._handshake_line(DAEMON_READY_SECONDS)
            if "error" in ready:
                cause = errors.error_from_data(ready["error"])
                raise self._unreachable(f"its daemon did not start: {cause.code}: {cause.message}")
            self.remote_daemon = ready.get("daemon") or {}
            if self.remote_daemon.get("version") != __version__:
                raise errors.HostVersionMismatch(
                    f"host {self.name}'s daemon runs agent-run {self.remote_daemon.get('version')}"
                    f", this daemon {__version__}: `agent-run api restart` on the host",
                    field="host",
                    host=self.name,
                    local=__version__,
                    remote=self.remote_daemon.get("version"),
                )
        except BaseException:
            await self.close()
            raise
        self.remote_version = hello["version"]
        self._tasks.append(asyncio.get_running_loop().create_task(self._read_replies()))
        return self

    async def _handshake_line(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            raise self._unreachable(f"no answer from its bridge within {timeout:.0f}s") from None
        if not line:
            await self._wait_exit()
            raise self._unreachable(
                f"ssh ended (exit {self.proc.returncode}) before the bridge answered"
            )
        try:
            message = json.loads(line)
        except ValueError:
            raise self._unreachable(
                f"its bridge said {line[:200]!r}, not agent-run's hello"
            ) from None
        if not isinstance(message, dict):
            raise self._unreachable(f"its bridge said {line[:200]!r}")
        return message

    async def _wait_exit(self) -> None:
        assert self.proc is not None
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
            if self._stderr_task is not None:  # ssh's last words, for the error message
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 2)
        except (TimeoutError, asyncio.CancelledError):
            pass

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            self._stderr.append(text)
            if self.log is not None:
                self.log.info("host.stderr", host=self.name, line=text[:500])

    async def _read_replies(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while line := await self.proc.stdout.readline():
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                waiter = (
                    self._pending.pop(reply.get("id"), None) if isinstance(reply, dict) else None
                )
                if waiter is not None and not waiter.done():
                    waiter.set_result(reply)
        except (ValueError, OSError):  # a line over the limit, a broken pipe: the link is done
            pass
        finally:
            await self._wait_exit()
            self._fail_pending(self._unreachable("the connection ended"))
            self.closed.set()

    def _fail_pending(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(error)

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        async with self._write_lock:
            try:
                self.proc.stdin.write(data)
                await self.proc.stdin.drain()
            except (ConnectionError, OSError):
                raise self._unreachable("the connection broke while sending") from None

    async def call(
        self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        """The host daemon's `result`, or its typed error; HostUnreachable when the link ends
        first (the call may or may not have run there)."""
        if not self.connected:
            raise self._unreachable("not connected")
        request_id = next(self._ids)
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        try:
            await self._send(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
            )
            reply = await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            raise self._unreachable(f"`{method}` got no answer within {timeout:.0f}s") from None
        finally:
            self._pending.pop(request_id, None)
        if "error" in reply:
            error = reply["error"]
            data = error.get("data") if isinstance(error, dict) else None
            if isinstance(data, dict) and isinstance(data.get("code"), str):
                raise errors.error_from_data(data)
            raise errors.ProtocolError(f"host {self.name}: {str(error)[:300]}")
        return reply.get("result")

    async def close(self) -> None:
        """End ssh (its bridge ends with it) and fail the calls in flight."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            await self._wait_exit()
        self._fail_pending(self._unreachable("the link was closed"))
        self.closed.set()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
