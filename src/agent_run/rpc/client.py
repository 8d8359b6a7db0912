"""The one client of the daemon's socket: a sync face (`Client`) and an async face
(`AsyncClient`) sharing one error mapping (`protocol.error_from_reply`), typed results (the
tool table's result model) and the wait-in-slices helper; starting a daemon is
`autostart.py`'s.

`call(tool, params)` returns the tool's result model and raises a `DomainError` subclass for
every error the daemon can send; `call_raw` returns the JSON `result` for callers that only
forward it (the CLI's JSON output, the web UI's JSON API, tests of the wire). Importing this
module imports neither pydantic (the models load on the first typed call) nor asyncio (the
async face imports it when made): a plain CLI verb pays for neither (`bench_cli.py`).
"""

import itertools
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_run.domain.errors import DaemonUnavailable, ProtocolError
from agent_run.rpc import protocol as p
from agent_run.system import unix_sockets
from agent_run.system.home import Home

if TYPE_CHECKING:
    from pydantic import BaseModel

    from agent_run.domain.views import WaitResult

READ_LIMIT = 64 * 1024 * 1024  # a reply line (a transcript page can be large)
# A read-only call cut by its daemon's death is sent again (to the next daemon) this many times.
CUT_RETRIES = 3


class NotConnected(DaemonUnavailable):
    """Nothing was sent, or nothing sent was read: no daemon listens, or the connection was
    reset before the daemon read the request (safe to start one and send again)."""


class CallCut(DaemonUnavailable):
    """The daemon read the request and went away before answering: it may have acted. The
    message says how to learn the outcome (`cut_advice`); `details.outcome` is "unknown"."""


def cut_error(method: str, params: dict[str, Any] | None, how: str) -> CallCut:
    return CallCut(
        f"the daemon {how} after it received `{method}` and before it answered: the outcome "
        f"is unknown (it may have acted). {cut_advice(method, params or {})}",
        outcome="unknown",
    )


def cut_advice(method: str, params: dict[str, Any]) -> str:
    """How to learn what a cut call did, from its tool's annotations and params."""
    from agent_run.tools.table import ALL_TOOLS

    tool = ALL_TOOLS.get(method)
    if tool is None:
        return "Check the daemon's state before sending it again."
    if tool.read_only:
        return f"`{method}` only reads: call it again."
    if "request_id" in tool.params.model_fields:
        if params.get("request_id"):
            return (
                f"Call it again with the same request_id ({params['request_id']!r}): the "
                "daemon returns what the first call made instead of doing it twice."
            )
        listing = "list_batches" if method == "batch_start" else "list_agents"
        return (
            f"It had no request_id: check `{listing}` before calling it again (give a "
            "request_id to make a retry safe)."
        )
    if tool.idempotent:
        return f"`{method}` is idempotent: calling it again is safe."
    return (
        f"Check with `agent` or `transcript` (`batch` for a run) whether it took effect "
        f"before calling `{method}` again."
    )


def read_only(method: str) -> bool:
    """Whether the tool only reads (its readOnlyHint): safe to send again after a cut."""
    from agent_run.tools.table import ALL_TOOLS

    tool = ALL_TOOLS.get(method)
    return tool is not None and tool.read_only


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
        except (ConnectionResetError, BrokenPipeError) as exc:  # our line was never read
            raise NotConnected(
                f"the daemon went away before reading `{method}`: {exc.strerror}; nothing was done"
            ) from None
        except ConnectionError as exc:
            raise cut_error(method, params, f"broke the connection ({exc})") from None
        if not reply:
            raise cut_error(method, params, "closed the connection")
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
    listens it starts one (as the CLI does, one start at a time) and sends again, unless the
    user stopped it (`DaemonStopped`: the web UI and MCP sessions retry on their own, and must
    not undo an `api stop`). A read-only call cut by its daemon's death is sent again, to the
    daemon started next (a `wait` outlives a daemon restart); any other cut call is `CallCut`,
    never sent twice."""

    def __init__(self, home: Home) -> None:
        import asyncio

        self.home = home
        self._start_lock = asyncio.Lock()

    async def call_raw(self, method: str, params: dict[str, Any] | None = None) -> Any:
        cuts = 0
        started = False  # a daemon started for this call: a second refusal is final
        while True:
            try:
                return await call_once(self.home, method, params)
            except NotConnected:
                if started:
                    raise
                await self._start()
                started = True
            except CallCut:
                if cuts >= CUT_RETRIES or not read_only(method):
                    raise
                cuts, started = cuts + 1, False

    async def _start(self) -> None:
        import asyncio

        from agent_run.rpc.autostart import connect

        async with self._start_lock:
            await asyncio.to_thread(lambda: connect(self.home, restart_stopped=False).close())

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
        raise cut_error(method, params, f"broke the connection ({exc})") from None
    finally:
        writer.close()
    if not reply:  # it read our line (a reset says otherwise), then ended: it may have acted
        raise cut_error(method, params, "closed the connection")
    return p.result_from_reply(reply)


def try_connect(
    home: Home, timeout: float | None = None, ping_timeout: float | None = None
) -> Client | None:
    """A client whose `ping` the daemon answered, or None. `ping_timeout` bounds that first
    answer (a readiness probe); `timeout` is the client's for its calls after it."""
    try:
        client = Client(home.socket_path, timeout if ping_timeout is None else ping_timeout)
    except OSError:
        return None
    try:
        client.pong = client.call_raw("ping")
        client.sock.settimeout(timeout)
        return client
    except (DaemonUnavailable, OSError):
        client.close()
        return None
