"""The one daemon client: every JSON-RPC error maps to the same typed error in both faces,
typed calls return the tool's result model, and a call that was sent is never sent twice."""

import asyncio
import json
import shutil
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_run.domain import errors as e
from agent_run.domain.batch_models import BatchList
from agent_run.domain.views import AgentView, Pong, WaitResult
from agent_run.rpc.client import CUT_RETRIES, AsyncClient, CallCut, Client, WaitSlices
from agent_run.system.home import Home
from tests.harness import DaemonProcess, short_tmpdir

# Both faces, as `call_raw(home, method, params)` and `call(home, tool, params)`.


def _sync_raw(home: Home, method: str, params: dict[str, Any]) -> Any:
    with Client(home.socket_path) as client:
        return client.call_raw(method, params)


def _async_raw(home: Home, method: str, params: dict[str, Any]) -> Any:
    return asyncio.run(AsyncClient(home).call_raw(method, params))


def _sync_typed(home: Home, tool: str, params: dict[str, Any]) -> Any:
    with Client(home.socket_path) as client:
        return client.call(tool, params)


def _async_typed(home: Home, tool: str, params: dict[str, Any]) -> Any:
    return asyncio.run(AsyncClient(home).call(tool, params))


RAW = pytest.mark.parametrize("call", [_sync_raw, _async_raw], ids=["sync", "async"])
TYPED = pytest.mark.parametrize("call", [_sync_typed, _async_typed], ids=["sync", "async"])


class CannedServer:
    """A raw socket server answering each request line with the canned reply of its method, for
    the replies the daemon cannot be made to send (no `data`, unknown codes, garbage)."""

    def __init__(self, replies: dict[str, bytes | None]) -> None:
        self.home = Home(short_tmpdir() / "h").ensure()
        self.replies, self.seen = replies, []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.home.socket_path))
        self.listener.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                request = json.loads(line)
                self.seen.append(request["method"])
                reply = self.replies[request["method"]]
                if reply is None:  # hang up without answering
                    return
                conn.sendall(reply.replace(b"ID", json.dumps(request["id"]).encode()) + b"\n")

    def close(self) -> None:
        self.listener.close()
        shutil.rmtree(self.home.root.parent, ignore_errors=True)  # a module fixture's folder


def _error(code: int, message: str, data: dict[str, Any] | None = None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return json.dumps({"jsonrpc": "2.0", "id": "ID", "error": err}).replace('"ID"', "ID").encode()


CANNED: dict[str, tuple[bytes | None, type[e.DomainError], str]] = {  # method -> reply, class, code
    "parse": (_error(-32700, "parse error"), e.ParseError, "ParseError"),
    "parse_typed": (
        _error(-32700, "bad", {"code": "InvalidUnicode", "message": "surrogate"}),
        e.InvalidUnicode,
        "InvalidUnicode",
    ),
    "invalid": (_error(-32600, "not a request"), e.MalformedRequest, "MalformedRequest"),
    "nesting": (
        _error(-32600, "deep", {"code": "NestingTooDeep", "message": "deep"}),
        e.NestingTooDeep,
        "NestingTooDeep",
    ),
    "too_long": (
        _error(-32600, "long", {"code": "LineTooLong", "message": "long", "details": {"limit": 9}}),
        e.LineTooLong,
        "LineTooLong",
    ),
    "no_method": (_error(-32601, "method not found: x"), e.MethodNotFound, "MethodNotFound"),
    "params": (_error(-32602, "invalid params"), e.InvalidParams, "InvalidParams"),
    "internal": (_error(-32603, "boom"), e.InternalError, "InternalError"),
    "domain_untyped": (_error(-32000, "something"), e.DomainError, "DomainError"),
    "domain": (
        _error(-32000, "gone", {"code": "AgentNotFound", "message": "gone", "field": "agent_id"}),
        e.AgentNotFound,
        "AgentNotFound",
    ),
    "future_code": (
        _error(-32000, "new", {"code": "SomethingNew", "message": "new"}),
        e.DomainError,
        "SomethingNew",
    ),
    "denied": (
        _error(-32000, "permission denied", {"code": "PermissionDenied", "message": "uid"}),
        e.PermissionDenied,
        "PermissionDenied",
    ),
    "unknown_rpc": (_error(-31999, "odd"), e.ProtocolError, "ProtocolError"),
    "not_json": (b"this is not json", e.ProtocolError, "ProtocolError"),
    "no_member": (b'{"jsonrpc": "2.0", "id": ID}', e.ProtocolError, "ProtocolError"),
    "bad_error": (
        b'{"jsonrpc": "2.0", "id": ID, "error": "nope"}',
        e.ProtocolError,
        "ProtocolError",
    ),
    "hang_up": (None, CallCut, "DaemonUnavailable"),  # it read the call: outcome unknown
}


@pytest.fixture(scope="module")
def canned() -> Iterator[CannedServer]:
    server = CannedServer(
        {name: reply for name, (reply, _, _) in CANNED.items()}
        | {"ping": b'{"jsonrpc": "2.0", "id": ID, "result": {"pong": "yes"}}'}
        | {tool: None for tool in ("start", "steer", "cancel", "agent")}  # each read, then cut
    )
    yield server
    server.close()


@RAW
@pytest.mark.parametrize("method", sorted(CANNED))
def test_every_error_reply_maps_to_its_typed_error_in_both_faces(
    canned: CannedServer, call: Callable[..., Any], method: str
) -> None:
    _, cls, code = CANNED[method]
    with pytest.raises(e.DomainError) as raised:
        call(canned.home, method, {})
    assert type(raised.value) is cls and raised.value.code == code


@RAW
def test_a_reply_without_typed_data_keeps_its_rpc_code(
    canned: CannedServer, call: Callable[..., Any]
) -> None:
    with pytest.raises(e.MethodNotFound) as raised:
        call(canned.home, "no_method", {})
    assert raised.value.details == {"rpc_code": -32601}
    assert isinstance(raised.value, e.ProtocolError)


@TYPED
def test_a_result_that_does_not_fit_its_model_is_a_protocol_error(
    canned: CannedServer, call: Callable[..., Any]
) -> None:
    with pytest.raises(e.ProtocolError, match="does not fit its model"):
        call(canned.home, "ping", {})


def test_the_async_face_never_sends_a_call_twice_when_the_daemon_hangs_up(
    canned: CannedServer,
) -> None:
    before = canned.seen.count("hang_up")
    with pytest.raises(e.DaemonUnavailable):
        _async_raw(canned.home, "hang_up", {})
    assert canned.seen.count("hang_up") == before + 1


@RAW
@pytest.mark.parametrize(
    ("tool", "params", "advice"),
    [
        (
            "start",
            {"task": "x", "request_id": "job-7"},
            "Call it again with the same request_id ('job-7'): the daemon returns what the "
            "first call made instead of doing it twice.",
        ),
        ("start", {"task": "x"}, "It had no request_id: check `list_agents` before calling"),
        ("steer", {"agent_id": "ag_x", "text": "y"}, "Check with `agent` or `transcript`"),
        ("cancel", {"agent_id": "ag_x"}, "`cancel` is idempotent: calling it again is safe."),
    ],
    ids=["request_id", "no-request_id", "steer", "idempotent"],
)
def test_a_call_cut_after_the_daemon_read_it_is_outcome_unknown_and_never_sent_twice(
    canned: CannedServer, call: Callable[..., Any], tool: str, params: dict[str, Any], advice: str
) -> None:
    before = canned.seen.count(tool)
    with pytest.raises(CallCut) as raised:
        call(canned.home, tool, params)
    assert canned.seen.count(tool) == before + 1  # it may have acted: never a second time
    message = raised.value.message
    assert "the outcome is unknown (it may have acted)" in message and advice in message, message
    assert "Nothing was" not in message and raised.value.code == "DaemonUnavailable"
    assert raised.value.details == {"outcome": "unknown"}


def test_the_async_face_sends_a_cut_read_only_call_again_and_the_sync_face_says_it_only_reads(
    canned: CannedServer,
) -> None:
    before = canned.seen.count("agent")
    with pytest.raises(CallCut) as raised:
        _async_raw(canned.home, "agent", {"agent_id": "ag_x"})
    assert canned.seen.count("agent") == before + 1 + CUT_RETRIES  # then it gives up
    assert "`agent` only reads: call it again." in raised.value.message
    with pytest.raises(CallCut):
        _sync_raw(canned.home, "agent", {"agent_id": "ag_x"})
    assert canned.seen.count("agent") == before + 2 + CUT_RETRIES  # the CLI's face: once


def test_a_connection_reset_before_the_request_was_read_starts_a_daemon_and_sends_again(
    home: Home,
) -> None:
    """A daemon killed while a child it was spawning still held its listening socket: our
    connection is queued, our line never read, then reset. The async face (the web UI's, MCP's)
    takes that as no daemon at all: it starts one and sends the call to it, once."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(home.socket_path))
    listener.listen(1)
    peeked: list[bytes] = []

    def die_without_reading() -> None:
        conn, _ = listener.accept()
        peeked.append(conn.recv(65536, socket.MSG_PEEK))  # the request arrived, unread
        listener.close()
        home.socket_path.unlink()  # as a dead daemon's socket refuses: gone or unlistened
        conn.close()  # unread data: the client sees ECONNRESET

    dying = threading.Thread(target=die_without_reading)
    dying.start()
    try:
        pong = _async_raw(home, "ping", {})
        dying.join()
        assert json.loads(peeked[0])["method"] == "ping"
        assert pong["pid"] == int((home.root / "daemon.lock").read_text())
    finally:
        _stop_autostarted(home)


def _stop_autostarted(home: Home) -> None:
    import os
    import signal

    from tests.harness import pgid_alive, wait_for

    lock = home.root / "daemon.lock"
    if lock.exists() and lock.read_text().strip():
        pid = int(lock.read_text())
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not pgid_alive(pid), timeout=30, what="the autostarted daemon to stop")


# Against a real daemon: the codes it can be made to send, and typed results.


@RAW
def test_the_daemon_answers_an_unknown_method_with_method_not_found_naming_the_field(
    daemon: DaemonProcess, home: Home, call: Callable[..., Any]
) -> None:
    with pytest.raises(e.MethodNotFound) as raised:
        call(home, "no_such_tool", {})
    assert raised.value.field == "method" and "no_such_tool" in raised.value.message


@RAW
def test_the_daemon_answers_bad_params_with_invalid_params_naming_the_field(
    daemon: DaemonProcess, home: Home, call: Callable[..., Any]
) -> None:
    with pytest.raises(e.InvalidParams) as raised:
        call(home, "agent", {"agent_id": 5})
    assert raised.value.field == "agent_id"
    with pytest.raises(e.InvalidParams) as raised:
        call(home, "list_agents", {"limit": 0})
    assert raised.value.field == "limit"


@RAW
def test_the_daemon_answers_a_domain_error_typed(
    daemon: DaemonProcess, home: Home, call: Callable[..., Any]
) -> None:
    with pytest.raises(e.AgentNotFound):
        call(home, "agent", {"agent_id": "ag_doesnotexist"})


@RAW
def test_the_daemon_answers_a_bug_with_internal_error_and_its_log(
    daemon: DaemonProcess, home: Home, call: Callable[..., Any]
) -> None:
    conn = sqlite3.connect(home.db_path, timeout=30)
    conn.execute("ALTER TABLE batches RENAME TO batches_gone")
    conn.commit()
    conn.close()
    with pytest.raises(e.InternalError) as raised:
        call(home, "list_batches", {})
    assert raised.value.details["rpc_code"] == -32603
    assert Path(raised.value.details["log"]) == home.logs_dir / "daemon.log"


def _raw_line(home: Home, line: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(home.socket_path))
        sock.sendall(line)
        return json.loads(sock.makefile("rb").readline())


@pytest.mark.parametrize(
    "line, cls",
    [
        (b"{not json\n", e.ParseError),
        (b'"\\ud800"\n', e.InvalidUnicode),
        (b"[1, 2]\n", e.MalformedRequest),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}\n', e.MalformedRequest),
        (b"[" * 100 + b"]" * 100 + b"\n", e.NestingTooDeep),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "nope"}\n', e.MethodNotFound),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "agent", "params": [1]}\n', e.InvalidParams),
    ],
)
def test_every_hostile_line_the_daemon_answers_maps_to_its_typed_error(
    daemon: DaemonProcess, home: Home, line: bytes, cls: type[e.DomainError]
) -> None:
    """What only a foreign client can send: the daemon's own reply, through the one mapping."""
    from agent_run.rpc.protocol import error_from_reply

    reply = _raw_line(home, line)
    assert "data" in reply["error"] and isinstance(reply["error"]["data"]["code"], str)
    assert type(error_from_reply(reply["error"])) is cls


@TYPED
def test_typed_calls_return_the_tools_result_models(
    daemon: DaemonProcess, home: Home, workdir: Path, call: Callable[..., Any]
) -> None:
    assert isinstance(call(home, "ping", {}), Pong)
    agent = call(home, "start", {"task": "answer: typed", "workdir": str(workdir)})
    assert isinstance(agent, AgentView) and agent.id.startswith("ag_")
    done = call(home, "wait", {"agent_id": agent.id, "timeout_seconds": 60})
    assert isinstance(done, WaitResult) and done.agent.state == "succeeded"
    assert isinstance(call(home, "list_batches", {}), BatchList)


def test_a_long_wait_in_slices_times_out_with_the_view_and_then_sees_the_end(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    with Client(home.socket_path) as client:
        agent = client.call(
            "start",
            {"task": "steps: 40\nstep_seconds: 0.25\nanswer: slow", "workdir": str(workdir)},
        )
        short = client.wait(agent.id, 0.6, 0.2)  # three slices at most
        assert short.timed_out and short.agent.id == agent.id
        done = asyncio.run(AsyncClient(home).wait(agent.id, None, 1.0))
        assert not done.timed_out and done.agent.state == "succeeded"


def test_wait_slices_never_ask_past_the_deadline() -> None:
    slices = WaitSlices(0.5, 2.0)
    assert slices.next_params("ag_x")["timeout_seconds"] <= 0.5
    assert WaitSlices(None, 2.0).next_params("ag_x") == {"agent_id": "ag_x", "timeout_seconds": 2.0}
