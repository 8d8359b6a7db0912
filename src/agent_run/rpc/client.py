"""The one client of the daemon's socket: a sync face (`Client`) and an async face
(`AsyncClient`) sharing one error mapping (`protocol.error_from_reply`), typed results (the
tool table's result model), the wait-in-slices helper, and daemon autostart.

`call(tool, params)` returns the tool's result model and raises a `DomainError` subclass for
every error the daemon can send; `call_raw` returns the JSON `result` for callers that only
forward it (the CLI's JSON output, the web UI's JSON API, tests of the wire). Importing this
module imports neither pydantic (the models load on the first typed call) nor asyncio (the
async face imports it when made): a plain CLI verb pays for neither (`bench_cli.py`).
"""

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_run.domain.errors import DaemonUnavailable, ProtocolError
from agent_run.rpc import protocol as p
from agent_run.system import unix_sockets
from agent_run.system.home import Home, clear_stop_mark, read_stop_mark

if TYPE_CHECKING:
    from pydantic import BaseModel

    from agent_run.domain.views import WaitResult

NO_AUTOSTART_ENV = "AGENT_RUN_NO_AUTOSTART"
AUTOSTART_TIMEOUT_SECONDS = 20.0
# `api serve` exits 1 on any error: another daemon holds the lock, the home is marked stopped
# (an autostarted one), a bad config.
SERVE_ERROR_EXIT = 1
READ_LIMIT = 64 * 1024 * 1024  # a reply line (a transcript page can be large)


class NotConnected(DaemonUnavailable):
    """Nothing was sent, or nothing sent was read: no daemon listens, or the connection was
    reset before the daemon read the request (safe to start one and send again)."""


class DaemonStopped(DaemonUnavailable):
    """The user stopped the daemon (`agent-run api stop`): a front-end that runs on its own (the
    web UI, an MCP session) or a question about the daemon (`api status`, `doctor`) does not
    start it again; `api serve`, `api restart` or a CLI verb does."""


def stopped_error(home: Home, mark: dict[str, Any]) -> DaemonStopped:
    when = f" at {mark['at']}" if mark.get("at") else ""
    return DaemonStopped(
        f"daemon stopped by `agent-run api stop`{when}; run `agent-run api restart` to start it "
        f"(home {home.root})",
        stopped_at=mark.get("at"),
    )


def result_model(tool: str) -> "type[BaseModel]":
    """The result model of a tool (or of `ping` / `tools`), from the tool table."""
    from agent_run.tools.table import ALL_TOOLS

    entry = ALL_TOOLS.get(tool)
    if entry is None:
        raise ProtocolError(f"no tool {tool!r} in this client's tool table", field="tool")
    return entry.result


def typed(tool: str, result: Any) -> "BaseModel":
    """A reply's `result` validated into the tool's result model (a mismatch is a ProtocolError)."""
    from pydantic import ValidationError

    try:
        return result_model(tool).model_validate(result, strict=False)
    except ValidationError as exc:
        raise ProtocolError(
            f"the daemon's `{tool}` result does not fit its model: {exc.errors()[0]}",
            field=".".join(map(str, exc.errors()[0]["loc"])) or None,
        ) from None


class WaitSlices:
    """One long wait as successive `wait` calls of at most `slice_seconds` (shared by the CLI,
    which slices to stay under socket and terminal timeouts, and MCP, which reports progress
    between slices). `timeout=None` waits until the agent ends."""

    def __init__(self, timeout: float | None, slice_seconds: float) -> None:
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.slice_seconds = slice_seconds

    def next_params(self, agent_id: str) -> dict[str, Any]:
        left = (
            self.slice_seconds
            if self.deadline is None
            else max(0.0, self.deadline - time.monotonic())
        )
        return {"agent_id": agent_id, "timeout_seconds": min(self.slice_seconds, left)}

    def over(self, result: "WaitResult") -> bool:
        """The agent ended, or the whole wait's time is up."""
        return not result.timed_out or (
            self.deadline is not None and time.monotonic() >= self.deadline
        )

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Client:
    """The sync face: one connection, requests in turn (the CLI, the quick start, tests)."""

    def __init__(self, socket_path: os.PathLike[str] | str, timeout: float | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            unix_sockets.connect(self.sock, Path(socket_path))  # a path of any length
        except BaseException:
            self.sock.close()
            raise
        self.file = self.sock.makefile("rb")
        self._ids = itertools.count(1)
        self.pong: dict[str, Any] | None = (
            None  # the daemon's `ping` answer, when connected by `try_connect`
        )

    def call_raw(self, method: str, params: dict[str, Any] | None = None) -> Any:
        line = p.encode_request(next(self._ids), method, params or {})  # LineTooLong before sending
        try:
            self.sock.sendall(line)
            reply = self.file.readline()
        except ConnectionError as exc:  # the daemon died mid-call: typed, not a traceback
            raise DaemonUnavailable(
                f"the daemon connection broke before it answered: {exc}"
            ) from None
        if not reply:
            raise DaemonUnavailable("the daemon closed the connection before answering")
        return p.result_from_reply(reply)

    def call(self, tool: str, params: dict[str, Any] | None = None) -> "BaseModel":
        return typed(tool, self.call_raw(tool, params))

    def wait(self, agent_id: str, timeout: float | None, slice_seconds: float) -> "WaitResult":
        slices = WaitSlices(timeout, slice_seconds)
        while True:
            result: WaitResult = self.call("wait", slices.next_params(agent_id))  # type: ignore[assignment]
            if slices.over(result):
                return result

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class RawClient(Client):
    """The sync face answering JSON (`call` is `call_raw`): for tests and benches of the wire."""

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:  # type: ignore[override]
        return self.call_raw(method, params)


class AsyncClient:
    """The async face: one short connection per call, so a caller that gives up (an MCP client
    cancelling a `wait`) also ends the daemon's side of a read-only request. When no daemon
    listens it starts one once (as the CLI does) and sends again, unless the user stopped it
    (`DaemonStopped`: the web UI and MCP sessions retry on their own, and must not undo an
    `api stop`); a call the daemon may have read is never sent twice."""

    def __init__(self, home: Home) -> None:
        import asyncio

        self.home = home
        self._start_lock = asyncio.Lock()

    async def call_raw(self, method: str, params: dict[str, Any] | None = None) -> Any:
        try:
            return await call_once(self.home, method, params)
        except NotConnected:
            import asyncio

            async with self._start_lock:
                await asyncio.to_thread(lambda: connect(self.home, restart_stopped=False).close())
            return await call_once(self.home, method, params)

    async def call(self, tool: str, params: dict[str, Any] | None = None) -> "BaseModel":
        return typed(tool, await self.call_raw(tool, params))

    async def wait(
        self,
        agent_id: str,
        timeout: float | None,
        slice_seconds: float,
        between: Callable[["WaitResult", float], Awaitable[None]] | None = None,
    ) -> "WaitResult":
        """Wait in slices; `between(result, elapsed)` runs after each slice that found it running."""
        slices = WaitSlices(timeout, slice_seconds)
        while True:
            result: WaitResult = await self.call("wait", slices.next_params(agent_id))  # type: ignore[assignment]
            if slices.over(result):
                return result
            if between is not None:
                await between(result, slices.elapsed())


async def call_once(home: Home, method: str, params: dict[str, Any] | None = None) -> Any:
    """One request on its own connection; `NotConnected` when nothing could be sent."""
    import asyncio

    line = p.encode_request(1, method, params or {})  # LineTooLong before anything is sent
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await unix_sockets.connect_async(sock, home.socket_path)  # a path of any length
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        raise NotConnected(f"no daemon answers at {home.socket_path}: {exc.strerror}") from None
    except BaseException:
        sock.close()
        raise
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=READ_LIMIT)
    try:
        writer.write(line)
        await writer.drain()
        reply = await reader.readline()
    except (ConnectionResetError, BrokenPipeError) as exc:
        # A reset (or a closed read side) means the daemon never read our one line: a listener
        # that died with the connection still queued (its socket kept open a moment longer by a
        # child being spawned), or a daemon killed before reading. Nothing was processed: as
        # good as never sent, so the caller may start a daemon and send it again.
        raise NotConnected(
            f"the daemon at {home.socket_path} went away before reading the request: {exc.strerror}"
        ) from None
    except ConnectionError as exc:
        raise DaemonUnavailable(f"the daemon connection broke before it answered: {exc}") from None
    finally:
        writer.close()
    if not reply:
        raise DaemonUnavailable("the daemon closed the connection before answering")
    return p.result_from_reply(reply)


def try_connect(home: Home, timeout: float | None = None) -> Client | None:
    try:
        client = Client(home.socket_path, timeout)
    except OSError:
        return None
    try:
        client.pong = client.call_raw("ping")
        return client
    except (DaemonUnavailable, OSError):
        client.close()
        return None


def start_daemon_detached(home: Home) -> subprocess.Popen[bytes]:
    """Launch `agent-run api serve --autostarted` in its own session (it refuses to serve while
    the home is marked stopped); its output goes to logs/daemon.out."""
    home.ensure()
    out = os.open(home.logs_dir / "daemon.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    argv = [sys.executable, "-m", "agent_run", "--home", str(home.root), "api", "serve"]
    try:
        proc = subprocess.Popen(
            [*argv, "--autostarted"],  # not the user's `api serve`: it leaves a stop mark be
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd="/",
            start_new_session=True,
        )
    finally:
        os.close(out)
    return proc


def connect(
    home: Home,
    *,
    autostart: bool = True,
    timeout: float | None = None,
    restart_stopped: bool = True,
) -> Client:
    """A client of the home's daemon, starting one (and saying so on stderr) when none answers.
    A daemon the user stopped (`api stop`) is started again only with `restart_stopped` (the
    user's own command); otherwise that is `DaemonStopped`."""
    client = try_connect(home, timeout)
    if client is not None:
        return client
    mark = read_stop_mark(home)
    if mark is not None and not restart_stopped:
        raise stopped_error(home, mark)
    off = os.environ.get(NO_AUTOSTART_ENV) == "1"
    if not autostart or off:
        raise DaemonUnavailable(
            f"no daemon answers at {home.socket_path}; start one with `agent-run api serve`"
            + (f" ({NO_AUTOSTART_ENV}=1 turned autostart off)" if off else "")
        )
    _check_config(home)
    if mark is not None:
        clear_stop_mark(home)  # the user's command undoes their `api stop`
    proc = start_daemon_detached(home)
    why = (
        "the daemon was stopped by `agent-run api stop`"
        if mark is not None
        else "no daemon was answering"
    )
    print(f"agent-run: {why} for {home.root}; started one (pid {proc.pid})", file=sys.stderr)
    return _await_started(home, proc, timeout)


def _await_started(home: Home, proc: subprocess.Popen[bytes], timeout: float | None) -> Client:
    deadline = time.monotonic() + AUTOSTART_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        client = try_connect(home, timeout)
        if client is not None:
            return client
        code = proc.poll()
        if code == SERVE_ERROR_EXIT:
            # Another daemon won the lock (keep knocking), or ours found the home marked
            # stopped by an `api stop` since, or the config turned invalid meanwhile.
            if (mark := read_stop_mark(home)) is not None:
                raise stopped_error(home, mark)
            _check_config(home)
        elif code is not None:
            break
        time.sleep(0.05)
    raise DaemonUnavailable(
        f"started a daemon (pid {proc.pid}) but it did not answer"
        + (
            f": {_last_line(home.logs_dir / 'daemon.out')}"
            if proc.poll()
            else f" within {AUTOSTART_TIMEOUT_SECONDS:.0f}s"
        )
    )


def _check_config(home: Home) -> None:
    """A config the daemon would refuse is the caller's `ConfigInvalid` (with its field), not a
    daemon that never answers: checked here, before anything is started or made in the home."""
    from agent_run.config.model import load_config

    load_config(home)


def _last_line(path: os.PathLike[str]) -> str:
    try:
        lines = open(path, errors="replace").read().strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
