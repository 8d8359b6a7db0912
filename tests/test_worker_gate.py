"""The worker gate: the supervisor serves the worker tools itself, one thread per connection to
its socket, with no process started for them; bounded in connections and message size."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agent_run.store.db import connect, write
from agent_run.supervisor.worker_gate import MAX_CONNECTIONS, SOCKET_NAME, WorkerGate
from agent_run.worker_tools.binding import token_hash
from agent_run.worker_tools.stdio import MAX_LINE_BYTES
from tests.harness import db_rows, engine_row, wait_for
from tests.test_admission import admit_without_spawning


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            found.update(int(p) for p in fh.read().split())
    return found


def _bound_execution(home, workdir, token: str) -> str:
    _agent_id, execution_id = admit_without_spawning(home, "answer: x", workdir)
    conn = connect(home.db_path)
    with write(conn):
        conn.execute(
            "UPDATE executions SET worker_token_sha256 = ? WHERE id = ?",
            (token_hash(token), execution_id),
        )
    conn.close()
    return execution_id


class Client:
    """One connection to a gate, speaking newline-delimited JSON-RPC as the relay carries it."""

    def __init__(self, path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, msg_id: int, method: str, params: dict | None = None) -> dict:
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params or {}}
        self.send(json.dumps(message).encode() + b"\n")
        return self.answer()

    def answer(self) -> dict:
        line = self.reader.readline()
        assert line, "the gate closed the connection"
        return json.loads(line)

    def at_end(self) -> bool:
        return self.reader.readline() == b""

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def _open_gate(home, workdir, token="the-token", tools=("finish",)):
    execution_id = _bound_execution(home, workdir, token)
    sandbox = home.root / "gate-sandbox"
    sandbox.mkdir()
    return WorkerGate(sandbox, home.root, execution_id, token, list(tools)), execution_id


def test_the_gate_serves_the_tools_in_its_own_process_and_records_the_call(home, workdir):
    gate, execution_id = _open_gate(home, workdir)
    before = _children(os.getpid())
    client = Client(gate.path)
    try:
        assert (
            client.request(1, "initialize", {"protocolVersion": "2025-06-18"})["result"][
                "protocolVersion"
            ]
            == "2025-06-18"
        )
        tools = client.request(2, "tools/list")["result"]["tools"]
        assert [t["name"] for t in tools] == ["finish"]
        assert _children(os.getpid()) == before, "a worker-tools process was started"
        answer = client.request(
            3,
            "tools/call",
            {"name": "finish", "arguments": {"summary": "done it", "status": "done"}},
        )
        assert answer["result"]["isError"] is False, answer
        assert answer["result"]["content"][0]["text"].startswith("recorded (finish #")
    finally:
        client.close()
        gate.close()
    rows = db_rows(
        home, "SELECT tool, payload FROM tool_reports WHERE execution_id = ?", (execution_id,)
    )
    assert [(r["tool"], json.loads(r["payload"])["summary"]) for r in rows] == [
        ("finish", "done it")
    ]
    assert not gate.path.exists()


def test_closing_the_gate_ends_a_connection_left_open(home, workdir):
    gate, _ = _open_gate(home, workdir)
    client = Client(gate.path)
    assert client.request(1, "ping")["result"] == {}
    closer = threading.Thread(target=gate.close)
    closer.start()
    closer.join(timeout=60)
    assert not closer.is_alive(), "close() hung on an idle connection"
    assert client.at_end()
    assert gate.connections == {}
    client.close()


def test_connections_past_the_limit_are_closed_and_the_served_ones_go_on(home, workdir):
    gate, _ = _open_gate(home, workdir)
    clients = [Client(gate.path) for _ in range(MAX_CONNECTIONS)]
    try:
        for n, client in enumerate(clients):
            assert client.request(n, "ping")["result"] == {}
        extra = Client(gate.path)
        assert extra.at_end(), "a connection past the limit was served"
        extra.close()
        clients.pop().close()
        wait_for(lambda: len(gate.connections) < MAX_CONNECTIONS, what="a served connection ends")
        again = Client(gate.path)
        clients.append(again)
        assert again.request(99, "ping")["result"] == {}
        assert clients[0].request(100, "ping")["result"] == {}
    finally:
        for client in clients:
            client.close()
        gate.close()


def test_an_overlong_message_gets_a_parse_error_and_the_connection_goes_on(home, workdir):
    gate, execution_id = _open_gate(home, workdir)
    client = Client(gate.path)
    try:
        too_long = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "pad": "'
            + b"x" * (MAX_LINE_BYTES + 10)
            + b'"}\n'
        )
        sender = threading.Thread(target=client.send, args=(too_long,))
        sender.start()
        answer = client.answer()
        sender.join(timeout=60)
        assert answer["id"] is None and answer["error"]["code"] == -32700
        assert str(MAX_LINE_BYTES) in answer["error"]["message"]
        assert client.request(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
    finally:
        client.close()
        gate.close()
    assert db_rows(home, "SELECT count(*) AS n FROM tool_reports")[0]["n"] == 0


def test_the_stdio_server_bounds_a_message_too(home, workdir):
    """`python -m agent_run.worker_tools` reads through the same bounded loop."""
    execution_id = _bound_execution(home, workdir, "the-token")
    env = {
        "AGENT_RUN_HOME": str(home.root),
        "AGENT_RUN_EXECUTION_ID": execution_id,
        "AGENT_RUN_WORKER_TOKEN": "the-token",
        "PATH": os.environ["PATH"],
    }
    lines = b"x" * (MAX_LINE_BYTES * 2) + b"\n" + b'{"jsonrpc":"2.0","id":7,"method":"ping"}\n'
    out = subprocess.run(
        [sys.executable, "-m", "agent_run.worker_tools"],
        input=lines,
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a.get("error", {}).get("code") for a in answers] == [-32700, None]
    assert str(MAX_LINE_BYTES) in answers[0]["error"]["message"]
    assert answers[1] == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_the_relay_imports_only_built_in_modules(home, workdir):
    """Every engine keeps one relay for its whole run: the command the gate gives engines runs
    it isolated, without `site`, importing neither `socket` nor `threading` (nor agent_run)."""
    gate, _ = _open_gate(home, workdir)
    relay = gate.mcp("agent-run")
    try:
        done = subprocess.run(
            [relay.command, "-X", "importtime", *relay.args],
            input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
            capture_output=True,
            timeout=60,
        )
    finally:
        gate.close()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.decode().splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "_socket" in imported, imported  # the measurement saw the relay's own imports
    assert not imported & {"socket", "threading", "site", "selectors", "enum"}, imported
    assert not [name for name in imported if name.startswith("agent_run")], imported


def test_a_relay_that_cannot_reach_its_gate_says_so_and_fails(home, workdir):
    gate, _ = _open_gate(home, workdir)
    relay = gate.mcp("agent-run")
    gate.close()  # the socket is gone
    done = subprocess.run([relay.command, *relay.args], input=b"", capture_output=True, timeout=60)
    assert done.returncode == 1
    assert b"worker-tools relay: cannot reach" in done.stderr and str(gate.path).encode() in (
        done.stderr
    )


def _running_relay_command(home, agent_id: str) -> tuple[dict, dict]:
    """Once the agent's engine runs and its gate listens: its execution row, and the relay
    server entry of its MCP config (what the engine starts)."""
    row = engine_row(home, agent_id)
    sandbox = home.execution_dir(agent_id, row["id"]) / "sandbox"
    wait_for((sandbox / SOCKET_NAME).exists, what="the worker gate's socket")
    [server] = json.loads((sandbox / "mcp.json").read_text())["mcpServers"].values()
    return row, server


async def _finish_through_the_relay(server: dict, supervisor_pid: int, engine_pid: int):
    params = StdioServerParameters(
        command=server["command"], args=server["args"], env={"PATH": os.environ["PATH"]}
    )
    async with stdio_client(params) as (read, write_stream):
        async with ClientSession(read, write_stream) as session:
            await session.initialize()
            tools = await session.list_tools()
            served_by = _children(supervisor_pid)
            result = await session.call_tool(
                "finish", {"summary": "through the relay", "status": "done"}
            )
            return [t.name for t in tools.tools], served_by, result


def test_the_mcp_sdk_client_reaches_a_running_supervisors_tools_through_the_relay(
    daemon, home, workdir
):
    """The product path: the relay as the engine's MCP config names it, the mcp SDK's client at
    its other end, the tools answered by the supervisor itself, which starts no process for
    them."""
    agent = daemon.call(
        "start", {"task": "steps: 400\nstep_seconds: 0.05\nanswer: real", "workdir": str(workdir)}
    )
    row, server = _running_relay_command(home, agent["id"])
    names, served_by, result = anyio.run(
        _finish_through_the_relay, server, row["supervisor_pid"], row["engine_pid"]
    )
    assert names == ["finish"]
    assert served_by == {row["engine_pid"]}, "the supervisor started a worker-tools process"
    assert not result.is_error and result.content[0].text.startswith("recorded")
    daemon.call("cancel", {"agent_id": agent["id"]})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    rows = db_rows(home, "SELECT tool FROM tool_reports WHERE agent_id = ?", (agent["id"],))
    assert [r["tool"] for r in rows] == ["finish"]


def _database_descriptors() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += "state.db" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return count


def test_a_connection_opens_the_database_only_at_its_first_call(home, workdir):
    """Engines connect at start and list the tools; the call comes at the end: until then a
    served connection holds no database connection in the supervisor."""
    gate, _ = _open_gate(home, workdir)
    before = _database_descriptors()
    client = Client(gate.path)
    try:
        client.request(1, "initialize", {"protocolVersion": "2025-06-18"})
        assert [t["name"] for t in client.request(2, "tools/list")["result"]["tools"]] == ["finish"]
        assert _database_descriptors() == before
        call = {"name": "finish", "arguments": {"summary": "s", "status": "done"}}
        assert client.request(3, "tools/call", call)["result"]["isError"] is False
        assert _database_descriptors() > before
    finally:
        client.close()
        gate.close()
    wait_for(lambda: _database_descriptors() == before, what="the connection's database closed")


def test_a_database_that_cannot_be_opened_fails_the_call_not_the_server(tmp_path):
    """The connection opens the database at its first call: where that fails, the call gets a
    typed internal error naming it and the server answers on."""
    (tmp_path / "state.db").mkdir()  # not a database file
    env = {
        "AGENT_RUN_HOME": str(tmp_path),
        "AGENT_RUN_EXECUTION_ID": "ex_none",
        "AGENT_RUN_WORKER_TOKEN": "t",
        "PATH": os.environ["PATH"],
    }
    call = {"name": "finish", "arguments": {"summary": "s", "status": "done"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ]
    out = subprocess.run(
        [sys.executable, "-m", "agent_run.worker_tools"],
        input=b"".join(json.dumps(m).encode() + b"\n" for m in lines),
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    listed, failed, pong = [json.loads(line) for line in out.splitlines()]
    assert [t["name"] for t in listed["result"]["tools"]] == ["finish"]
    assert failed["error"]["code"] == -32603 and "OperationalError" in failed["error"]["message"]
    assert pong == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_a_relay_ends_when_its_supervisor_is_killed(daemon, home, workdir):
    """kill -9 of the supervisor ends what served its worker tools with it: the relay sees its
    connection close and exits, though its engine still holds its stdin open (no process of
    the tools is left to serve a dead execution)."""
    agent = daemon.call(
        "start", {"task": "steps: 2000\nstep_seconds: 0.05\nanswer: real", "workdir": str(workdir)}
    )
    row, server = _running_relay_command(home, agent["id"])
    relay = subprocess.Popen(
        [server["command"], *server["args"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert relay.stdin and relay.stdout
        relay.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        relay.stdin.flush()
        assert json.loads(relay.stdout.readline())["result"] == {}
        os.kill(row["supervisor_pid"], signal.SIGKILL)
        assert relay.wait(timeout=60) == 0
        assert relay.stdout.read() == b""
    finally:
        relay.kill()
        relay.wait()
    state = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]["state"]
    assert state == "lost"


GATE_HOST = """
import resource, sys
from pathlib import Path
from agent_run.supervisor.worker_gate import WorkerGate
home, execution, token, sandbox = sys.argv[1:5]
gate = WorkerGate(Path(sandbox), Path(home), execution, token, ["finish"])
print("ready", flush=True)
sys.stdin.readline()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (3, hard))  # below every descriptor it has open
print("full", flush=True)
sys.stdin.readline()
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("freed", flush=True)
sys.stdin.readline()
"""


def test_the_gate_accepts_again_after_its_process_ran_out_of_descriptors(home, workdir):
    """A connection that arrives while the supervisor has no descriptor left fails to be
    accepted (EMFILE); the gate's thread lives on and accepts it once descriptors are free.
    Before, the accept thread ended on that OSError and the engine's worker tools with it."""
    execution_id = _bound_execution(home, workdir, "the-token")
    sandbox = home.root / "gate-sandbox"
    sandbox.mkdir()
    host = subprocess.Popen(
        [sys.executable, "-c", GATE_HOST, str(home.root), execution_id, "the-token", str(sandbox)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout.readline() == "ready\n"
        host.stdin.write("fill\n")
        host.stdin.flush()
        assert host.stdout.readline() == "full\n"
        early = Client(sandbox / SOCKET_NAME)  # the gate's accept fails with EMFILE
        started = time.monotonic()
        wait_for(lambda: time.monotonic() - started > 1.0, timeout=10, what="1 s of EMFILE")
        host.stdin.write("free\n")
        host.stdin.flush()
        assert host.stdout.readline() == "freed\n"
        for client in (Client(sandbox / SOCKET_NAME), early):  # a new one, and the queued one
            client.sock.settimeout(20)
            answer = client.request(1, "initialize", {"protocolVersion": "2025-06-18"})
            assert answer["result"]["protocolVersion"] == "2025-06-18"
            client.close()
    finally:
        host.kill()
        host.wait()
