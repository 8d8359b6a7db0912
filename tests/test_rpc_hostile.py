"""Hostile bytes on api.sock: every request line gets a typed answer and the connection keeps working."""

from typing import Any

import pytest

from agent_run.rpc.protocol import MAX_NESTING
from agent_run.system.home import Home
from tests.harness import DaemonProcess, make_home, remove_home
from tests.test_rpc import Wire

INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def hostile_home() -> Any:
    home = make_home()
    daemon = DaemonProcess(home).start()
    yield home
    daemon.stop()
    remove_home(home)


@pytest.fixture
def wire(hostile_home: Home) -> Any:
    w = Wire(hostile_home)
    yield w
    w.close()


def _still_serves(wire: Wire) -> None:
    assert wire.call("ping", request_id="after")["result"]["pong"] is True


@pytest.mark.parametrize(
    "line",
    [
        rb'{"jsonrpc": "2.0", "id": "\ud800", "method": "ping"}',
        rb'{"jsonrpc": "2.0", "id": 1, "method": "\udfff"}',
        rb'{"jsonrpc": "2.0", "id": 1, "method": "ping\ud83d"}',
        rb'{"jsonrpc": "2.0", "id": 1, "method": "agent", "params": {"agent_id": "\ud800"}}',
        rb'{"jsonrpc": "2.0", "id": 1, "method": "list_agents", "params": {"\ud800": 1}}',
    ],
    ids=["id", "method", "method-tail", "param-value", "param-key"],
)
def test_a_lone_surrogate_gets_a_parse_error_and_the_connection_keeps_working(
    wire: Wire, line: bytes
) -> None:
    wire.send_bytes(line + b"\n")
    reply = wire.reply()
    assert reply["id"] is None
    assert reply["error"]["code"] == -32700
    assert reply["error"]["data"]["code"] == "InvalidUnicode"
    _still_serves(wire)


def test_a_paired_surrogate_escape_is_valid_unicode_and_served(wire: Wire) -> None:
    wire.send_bytes(rb'{"jsonrpc": "2.0", "id": "\ud83d\ude00", "method": "ping"}' + b"\n")
    reply = wire.reply()
    assert reply["id"] == "\U0001f600" and reply["result"]["pong"] is True


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 5_000, 100_000])
@pytest.mark.parametrize("where", ["params", "id"])
def test_json_nested_too_deep_is_an_invalid_request_and_the_connection_keeps_working(
    wire: Wire, depth: int, where: str
) -> None:
    nested = b"[" * depth + b"]" * depth
    if where == "id":
        line = b'{"jsonrpc": "2.0", "id": ' + nested + b', "method": "ping"}'
    else:
        line = b'{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"x": ' + nested + b"}}"
    wire.send_bytes(line + b"\n")
    reply = wire.reply()
    assert reply["id"] is None
    assert reply["error"]["code"] == -32600
    assert reply["error"]["data"]["code"] == "NestingTooDeep"
    _still_serves(wire)


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(wire: Wire, constant: bytes) -> None:
    wire.send_bytes(
        b'{"jsonrpc": "2.0", "id": 2, "method": "list_agents", "params": {"wait_seconds": '
        + constant
        + b"}}\n"
    )
    reply = wire.reply()
    assert reply["error"]["code"] == -32700
    _still_serves(wire)


def test_an_integer_of_ten_thousand_digits_is_a_parse_error(wire: Wire) -> None:
    wire.send_bytes(
        b'{"jsonrpc": "2.0", "id": 2, "method": "list_agents", "params": {"offset": '
        + b"9" * 10_000
        + b"}}\n"
    )
    assert wire.reply()["error"]["code"] == -32700
    _still_serves(wire)


@pytest.mark.parametrize("request_id", [{"a": 1}, [1], True])
def test_an_id_that_is_not_a_string_number_or_null_is_an_invalid_request(
    wire: Wire, request_id: Any
) -> None:
    wire.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
    reply = wire.reply()
    assert reply["id"] is None and reply["error"]["code"] == -32600
    _still_serves(wire)


@pytest.mark.parametrize(
    "method,params,field",
    [
        ("list_agents", {"offset": 2**63}, "offset"),
        ("list_agents", {"offset": 2**64 + 5}, "offset"),
        ("list_agents", {"after_revision": 2**63}, "after_revision"),
        ("list_agents", {"after_revision": 10**30}, "after_revision"),
        ("transcript", {"agent_id": "ag_abc", "cursor": 2**63}, "cursor"),
        ("list_batches", {"offset": 2**63}, "offset"),
        ("list_agents", {"limit": 2**70}, "limit"),
        (
            "batch_start",
            {"workflow": "repeated", "project": "/tmp", "prompt": "x", "runs": 2**63},
            "runs",
        ),
    ],
)
def test_integers_of_64_bits_and_more_are_invalid_params_naming_the_field(
    wire: Wire, method: str, params: dict[str, Any], field: str
) -> None:
    reply = wire.call(method, params, request_id=6)
    assert reply["error"]["code"] == -32602, reply
    assert reply["error"]["data"]["field"] == field


def test_the_largest_int64_is_still_accepted(wire: Wire) -> None:
    reply = wire.call(
        "list_agents", {"offset": INT64_MAX, "after_revision": INT64_MAX}, request_id=7
    )
    assert reply["result"]["items"] == [] and reply["result"]["offset"] == INT64_MAX


@pytest.mark.parametrize(
    "method,params,field",
    [
        ("start", {"task": "answer: x", "workdir": "/tmp", "stall_seconds": True}, "stall_seconds"),
        ("start", {"task": "answer: x", "workdir": "/tmp", "wall_seconds": "1"}, "wall_seconds"),
        ("start", {"task": "answer: x", "workdir": "/tmp", "runtime": ""}, "runtime"),
        ("start", {"task": "answer: x", "workdir": "/tmp", "model": ""}, "model"),
        ("start", {"task": "answer: x", "workdir": "/tmp", "read_roots": [""]}, "read_roots.0"),
        ("start", {"task": "answer: x", "workdir": "/tmp", "request_id": 5}, "request_id"),
        ("start", {"task": 5, "workdir": "/tmp"}, "task"),
        ("list_agents", {"limit": 1.0}, "limit"),
        ("list_agents", {"limit": "5"}, "limit"),
        ("list_agents", {"runtime": ""}, "runtime"),
        ("list_agents", {"state": [3]}, "state.0"),
        ("wait", {"agent_id": "ag_abc", "timeout_seconds": False}, "timeout_seconds"),
        ("doc", {"topic": ""}, "topic"),
        ("batch_clean", {"batch_id": "bt_abc", "confirm": "yes"}, "confirm"),
        ("batch_clean", {"batch_id": "bt_abc", "confirm": 1}, "confirm"),
        (
            "batch_start",
            {"workflow": "repeated", "project": "/tmp", "prompt": "x", "runs": 1, "runtime": ""},
            "runtime",
        ),
        (
            "batch_start",
            {"workflow": "repeated", "project": "/tmp", "prompt": "x", "runs": "2"},
            "runs",
        ),
        (
            "batch_start",
            {
                "workflow": "ranked",
                "project": "/tmp",
                "prompt": "x",
                "runs": 1,
                "verify_command": "",
            },
            "verify_command",
        ),
        (
            "batch_start",
            {
                "workflow": "ranked",
                "project": "/tmp",
                "prompt": "x",
                "runs": 1,
                "verify_command": "a\x00b",
            },
            "verify_command",
        ),
        (
            "batch_start",
            {
                "workflow": "repeated",
                "project": "/tmp",
                "prompt": "x",
                "runs": 1,
                "base_ref": "a\x00b",
            },
            "base_ref",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_params_are_validated_strictly_on_the_socket(
    wire: Wire, method: str, params: dict[str, Any], field: str
) -> None:
    reply = wire.call(method, params, request_id=8)
    assert reply["error"]["code"] == -32602, reply
    assert reply["error"]["data"]["field"] == field


def test_an_integer_is_still_accepted_for_a_seconds_field(wire: Wire) -> None:
    reply = wire.call("list_agents", {"after_revision": 0, "wait_seconds": 0}, request_id=9)
    assert "result" in reply, reply
