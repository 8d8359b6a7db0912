"""The daemon's newline-delimited JSON-RPC 2.0 on api.sock, spoken byte for byte."""

import json
import os
import socket
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_run.rpc.protocol import MAX_LINE_BYTES
from agent_run.system.home import Home
from agent_run.tools.table import TOOLS
from tests.harness import DaemonProcess, cli, make_home, raw_socket, remove_home, wait_for


class Wire:
    """One raw connection to api.sock: write bytes or objects, read one reply line at a time."""

    def __init__(self, home: Home) -> None:
        self.sock = raw_socket(home)
        self.file = self.sock.makefile("rb")

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: Any = None, request_id: Any = 1) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def reply(self) -> dict[str, Any]:
        line = self.file.readline()
        assert line, "the daemon closed the connection instead of replying"
        assert line.endswith(b"\n")
        return json.loads(line)

    def call(self, method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
        self.request(method, params, request_id)
        reply = self.reply()
        assert reply["id"] == request_id, f"a reply to another request: {reply}"
        return reply

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@pytest.fixture(scope="module")
def shared_home() -> Any:
    """One daemon for the stateless protocol tests of this module (a daemon takes ~1 s to boot)."""
    home = make_home()
    daemon = DaemonProcess(home).start()
    yield home
    daemon.stop()
    remove_home(home)


@pytest.fixture
def wire(shared_home: Home) -> Any:
    w = Wire(shared_home)
    yield w
    w.close()


@pytest.fixture
def own_wire(daemon: DaemonProcess, home: Home) -> Any:
    w = Wire(home)
    yield w
    w.close()


def start_agent(daemon: DaemonProcess, workdir: Path, task: str) -> str:
    return daemon.call("start", {"task": task, "workdir": str(workdir)})["id"]


# -- error codes ------------------------------------------------------------------------------


def test_invalid_json_gets_parse_error_with_null_id_and_the_connection_stays_usable(
    wire: Wire,
) -> None:
    wire.send_bytes(b'{"jsonrpc": "2.0", "id": 7, "method": \n')
    reply = wire.reply()
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] is None
    assert reply["error"]["code"] == -32700
    assert wire.call("ping", request_id=8)["result"]["pong"] is True


def test_invalid_utf8_gets_parse_error(wire: Wire) -> None:
    wire.send_bytes(b'{"jsonrpc": "2.0", "id": 1, "method": "ping\xff\xfe"}\n')
    reply = wire.reply()
    assert reply["id"] is None
    assert reply["error"]["code"] == -32700


@pytest.mark.parametrize(
    "line", [b"[]", b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', b"42", b'"ping"', b"null"]
)
def test_a_request_that_is_not_a_json_object_is_an_invalid_request(wire: Wire, line: bytes) -> None:
    wire.send_bytes(line + b"\n")
    reply = wire.reply()
    assert reply["id"] is None
    assert reply["error"]["code"] == -32600


@pytest.mark.parametrize(
    "message",
    [
        {"id": 5, "method": "ping"},
        {"jsonrpc": "1.0", "id": 5, "method": "ping"},
        {"jsonrpc": 2.0, "id": 5, "method": "ping"},
        {"jsonrpc": "2.0", "id": 5},
        {"jsonrpc": "2.0", "id": 5, "method": 3},
    ],
    ids=["missing-jsonrpc", "jsonrpc-1.0", "jsonrpc-number", "missing-method", "method-not-string"],
)
def test_missing_or_wrong_jsonrpc_or_method_is_an_invalid_request_echoing_the_id(
    wire: Wire, message: dict[str, Any]
) -> None:
    wire.send(message)
    reply = wire.reply()
    assert reply["id"] == 5
    assert reply["error"]["code"] == -32600
    assert "result" not in reply


def test_unknown_method_gets_method_not_found(wire: Wire) -> None:
    reply = wire.call("no_such_method", {}, request_id="abc")
    assert reply["id"] == "abc"
    assert reply["error"]["code"] == -32601
    assert "no_such_method" in reply["error"]["message"]


@pytest.mark.parametrize(
    "method,params,field",
    [
        ("agent", {"agent_id": "nope"}, "agent_id"),
        ("agent", {}, "agent_id"),
        ("agent", {"agent_id": "ag_abc", "colour": "red"}, "colour"),
        ("start", {"workdir": "/tmp"}, "task"),
        ("start", {"task": "answer: hi", "workdir": "/tmp", "profile": "root"}, "profile"),
        ("wait", {"agent_id": "ag_abc", "timeout_seconds": -1}, "timeout_seconds"),
        ("list_agents", {"state": ["running", "bogus"]}, "state.1"),
        ("agent", [1, 2], "params"),
        ("agent", "ag_abc", "params"),
    ],
    ids=[
        "agent-bad-id",
        "agent-missing-id",
        "agent-unknown-key",
        "start-missing-task",
        "start-bad-profile",
        "wait-negative-timeout",
        "list-nested-state",
        "params-array",
        "params-string",
    ],
)
def test_bad_params_get_invalid_params_naming_the_dotted_field(
    wire: Wire, method: str, params: Any, field: str
) -> None:
    reply = wire.call(method, params, request_id=11)
    assert reply["id"] == 11
    error = reply["error"]
    assert error["code"] == -32602
    assert error["data"]["code"] == "InvalidParams"
    assert error["data"]["field"] == field
    assert error["data"]["message"]


def test_domain_error_for_an_unknown_well_formed_agent_id_is_agent_not_found(wire: Wire) -> None:
    reply = wire.call("agent", {"agent_id": "ag_zzzz"}, request_id=3)
    assert reply["id"] == 3
    assert reply["error"]["code"] == -32000
    assert reply["error"]["data"]["code"] == "AgentNotFound"
    assert reply["error"]["data"]["field"] == "agent_id"
    assert "ag_zzzz" in reply["error"]["data"]["message"]


def test_omitted_params_are_treated_as_an_empty_object(wire: Wire) -> None:
    reply = wire.call("list_agents", None, request_id=2)
    assert reply["result"]["limit"] == 50
    assert reply["result"]["offset"] == 0


# -- framing ----------------------------------------------------------------------------------


def _ping_padded_to(length: int) -> bytes:
    body = b'{"jsonrpc":"2.0","id":"big","method":"ping"}'
    return body + b" " * (length - len(body))


def test_line_over_one_mib_gets_line_too_long_and_the_connection_keeps_serving(
    shared_home: Home,
) -> None:
    home = shared_home
    bystander = Wire(home)
    daemon_pid = bystander.call("ping", request_id=1)["result"]["pid"]
    offender = Wire(home)
    sender_errors: list[BaseException] = []

    def send_long_line() -> None:
        try:
            offender.send_bytes(
                b'{"jsonrpc":"2.0","id":1,"method":"ping","pad":"'
                + b"x" * (MAX_LINE_BYTES + 64 * 1024)
                + b'"}\n'
            )
        except OSError as exc:
            sender_errors.append(exc)

    sender = threading.Thread(target=send_long_line)
    sender.start()
    reply = offender.reply()
    sender.join(timeout=30)
    assert sender_errors == [], "the daemon must read the whole long line, not drop the connection"
    assert reply["id"] is None
    assert reply["error"]["code"] == -32600
    assert reply["error"]["data"]["code"] == "LineTooLong"
    assert reply["error"]["data"]["details"]["limit"] == MAX_LINE_BYTES
    # The rest of the long line was discarded: the next line is a request of its own.
    assert offender.call("ping", request_id=9)["result"]["pid"] == daemon_pid
    offender.close()

    assert bystander.call("ping", request_id=2)["result"]["pid"] == daemon_pid
    newcomer = Wire(home)
    assert newcomer.call("ping", request_id=3)["result"]["pong"] is True
    bystander.close()
    newcomer.close()


def test_a_long_line_without_a_newline_then_eof_still_gets_line_too_long(shared_home: Home) -> None:
    offender = Wire(shared_home)
    offender.send_bytes(b"x" * (MAX_LINE_BYTES + 10))
    offender.sock.shutdown(socket.SHUT_WR)
    reply = offender.reply()
    assert reply["error"]["data"]["code"] == "LineTooLong"
    assert offender.file.readline() == b""
    offender.close()


def test_a_line_of_exactly_one_mib_is_served(wire: Wire) -> None:
    wire.send_bytes(_ping_padded_to(MAX_LINE_BYTES) + b"\n")
    assert wire.reply()["result"]["pong"] is True


def test_a_line_one_byte_over_one_mib_is_refused(wire: Wire) -> None:
    wire.send_bytes(_ping_padded_to(MAX_LINE_BYTES + 1) + b"\n")
    reply = wire.reply()
    assert reply.get("error", {}).get("data", {}).get("code") == "LineTooLong", reply


def test_blank_lines_between_requests_are_ignored(wire: Wire) -> None:
    wire.send_bytes(b"\n\r\n   \n")
    assert wire.call("ping", request_id=4)["id"] == 4


# -- concurrency and disconnects --------------------------------------------------------------


def test_client_disconnecting_mid_wait_does_not_disturb_the_daemon_or_the_agent(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    agent_id = start_agent(daemon, workdir, "steps: 15\nstep_seconds: 0.1\nanswer: x")
    leaver = Wire(home)
    leaver.request("wait", {"agent_id": agent_id, "timeout_seconds": 20}, request_id="w")
    # A ping read after the wait proves the daemon has taken the wait in hand.
    leaver.request("ping", request_id="p")
    assert leaver.reply()["id"] == "p"
    leaver.sock.shutdown(socket.SHUT_RDWR)
    leaver.close()

    other = Wire(home)
    assert other.call("ping", request_id=1)["result"]["pid"] == daemon.proc.pid
    reply = other.call("wait", {"agent_id": agent_id, "timeout_seconds": 20}, request_id=2)
    assert reply["result"]["timed_out"] is False
    assert reply["result"]["agent"]["state"] == "succeeded"
    assert daemon.proc.poll() is None
    other.close()


def test_requests_on_one_connection_run_concurrently(
    daemon: DaemonProcess, own_wire: Wire, workdir: Path
) -> None:
    agent_id = start_agent(daemon, workdir, "steps: 10\nstep_seconds: 0.1\nanswer: x")
    own_wire.request("wait", {"agent_id": agent_id, "timeout_seconds": 5}, request_id="slow-wait")
    own_wire.request("ping", request_id="quick-ping")
    first, second = own_wire.reply(), own_wire.reply()
    assert first["id"] == "quick-ping"
    assert first["result"]["pong"] is True
    assert second["id"] == "slow-wait"
    assert second["result"]["agent"]["id"] == agent_id


def test_a_notification_gets_no_reply_but_is_executed(
    daemon: DaemonProcess, own_wire: Wire, workdir: Path
) -> None:
    own_wire.send(
        {
            "jsonrpc": "2.0",
            "method": "start",
            "params": {"task": "answer: hi", "workdir": str(workdir)},
        }
    )
    own_wire.send({"jsonrpc": "2.0", "method": "no_such_method"})
    own_wire.send({"jsonrpc": "2.0", "method": "agent", "params": {"agent_id": "nope"}})
    own_wire.send({"jsonrpc": "2.0", "method": "ping"})
    # Every reply on the wire must belong to a request that carried an id.
    listed = wait_for(
        lambda: own_wire.call("list_agents", {}, request_id="list")["result"]["items"],
        timeout=20,
        what="the notified start to create its agent",
    )
    done = own_wire.call(
        "wait", {"agent_id": listed[0]["id"], "timeout_seconds": 20}, request_id="wait"
    )
    assert done["id"] == "wait"
    assert done["result"]["agent"]["state"] == "succeeded"
    reply = own_wire.call("ping", request_id="last")
    assert reply["id"] == "last"
    assert own_wire.call("list_agents", {}, request_id="count")["result"]["total"] == 1


def test_tools_lists_every_tool_of_the_table_with_schemas_and_annotations(wire: Wire) -> None:
    reply = wire.call("tools", {}, request_id=1)
    tools = {t["name"]: t for t in reply["result"]["tools"]}
    assert set(tools) == set(TOOLS)
    for name, tool in TOOLS.items():
        listed = tools[name]
        assert listed["description"] == tool.doc
        assert listed["inputSchema"] == tool.params.model_json_schema()
        assert listed["outputSchema"] == tool.result.model_json_schema()
        assert listed["annotations"] == {
            "readOnlyHint": tool.read_only,
            "destructiveHint": tool.destructive,
            "idempotentHint": tool.idempotent,
        }
        assert set(listed["inputSchema"].get("properties", {})) == set(tool.params.model_fields)


def test_every_tool_of_the_table_is_served_on_the_socket(wire: Wire) -> None:
    for n, name in enumerate(TOOLS):
        reply = wire.call(name, {"definitely_not_a_param": 1}, request_id=n)
        assert reply["error"]["code"] == -32602, (name, reply)
        fields = [e["field"] for e in reply["error"]["data"]["errors"]]
        assert "definitely_not_a_param" in fields, (name, reply)


# -- the socket file and the home -------------------------------------------------------------


def test_socket_is_0600_and_home_0700_even_under_a_permissive_umask() -> None:
    home = make_home()
    home.root.chmod(0o755)
    old = os.umask(0)
    try:
        daemon = DaemonProcess(home).start()
    finally:
        os.umask(old)
    try:
        sock_stat = home.socket_path.stat()
        assert stat.S_ISSOCK(sock_stat.st_mode)
        assert stat.S_IMODE(sock_stat.st_mode) == 0o600
        assert stat.S_IMODE(home.root.stat().st_mode) == 0o700
        assert stat.S_IMODE(home.db_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(home.lock_path.stat().st_mode) == 0o600
        for path in home.root.rglob("*"):
            mode = stat.S_IMODE(path.lstat().st_mode)
            if path.is_dir():
                assert mode == 0o700, path
            elif path.name not in ("daemon-test.out", "config.toml"):  # written by the test itself
                assert mode & 0o077 == 0, (path, oct(mode))
    finally:
        daemon.stop()
        remove_home(home)


def test_second_daemon_on_the_same_home_refuses_and_the_first_keeps_serving(
    daemon: DaemonProcess, home: Home
) -> None:
    second = cli(home, "api", "serve", timeout=30)
    assert second.returncode == 1  # an error, as `api serve --help` lists
    assert "error: Conflict: " in second.stderr and "already serves" in second.stderr
    assert str(home.root) in second.stderr
    assert str(daemon.proc.pid) in second.stderr
    assert home.socket_path.exists()
    assert daemon.call("ping")["pid"] == daemon.proc.pid
    assert home.lock_path.read_text().strip() == str(daemon.proc.pid)


def test_stale_socket_of_a_killed_daemon_is_reclaimed_by_a_new_one(
    daemon: DaemonProcess, home: Home
) -> None:
    daemon.kill9()
    assert home.socket_path.exists(), "kill -9 leaves the socket file behind"
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(ConnectionRefusedError):
        probe.connect(str(home.socket_path))
    probe.close()
    successor = DaemonProcess(home).start()  # start() checks ping answers with the new pid
    try:
        assert successor.proc.pid != daemon.proc.pid
        assert successor.call("ping")["pid"] == successor.proc.pid
        assert stat.S_IMODE(home.socket_path.stat().st_mode) == 0o600
    finally:
        successor.stop()
    wait_for(
        lambda: not home.socket_path.exists(),
        timeout=10,
        what="a daemon stopped by SIGTERM to remove its socket",
    )


_CONNECT_AS_OTHER_USER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
# The daemon refuses at once, before any request: send nothing, read its verdict.
f = s.makefile("rb")
sys.stdout.write(f.readline().decode())
try:
    rest = f.readline()
except ConnectionResetError:
    rest = b""
sys.stdout.write("EOF\\n" if rest == b"" else "MORE\\n")
"""


@pytest.mark.skipif(
    os.getuid() != 0 or not Path("/usr/bin/python3").exists(),
    reason="needs root to connect as another uid",
)
def test_a_peer_of_another_uid_is_refused_even_when_the_socket_file_is_opened_up(
    daemon: DaemonProcess, home: Home
) -> None:
    # Defeat the file-mode layer on purpose, to reach the daemon's own peer-uid check.
    home.root.parent.chmod(0o711)
    home.root.chmod(0o711)
    home.socket_path.chmod(0o666)
    result = subprocess.run(
        ["/usr/bin/python3", "-c", _CONNECT_AS_OTHER_USER, str(home.socket_path)],
        capture_output=True,
        text=True,
        timeout=30,
        user=65534,
        group=65534,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    first, closed = result.stdout.splitlines()
    reply = json.loads(first)
    assert "result" not in reply
    assert reply["error"]["code"] == -32000
    assert reply["error"]["data"]["code"] == "PermissionDenied"
    assert closed == "EOF"
    assert daemon.call("ping")["pid"] == daemon.proc.pid
