"""A busy database never ends a healthy agent: another connection holds the write lock (BEGIN
IMMEDIATE) for longer than the supervisors' busy timeout (`[supervisor] busy_timeout_seconds`,
0.2 s here), while agents stream; every agent still succeeds with every message stored once."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent_run.supervisor.identity import Liveness, ProcessIdentity, liveness
from agent_run.system.home import Home
from tests.harness import DaemonProcess, db_rows, make_home, remove_home, wait_for

CONFIG = """schema_version = 1
default_runtime = "demo"
[supervisor]
stall_seconds = {stall}
cancel_grace_seconds = 1.0
nice = 0
busy_timeout_seconds = 0.2
storage_buffer_bytes = {buffer}
[daemon]
reconcile_interval_seconds = 0.2
busy_timeout_seconds = 300
[runtimes.demo]
engine = "demo"
models = ["demo-1"]
default_model = "demo-1"
"""
# Streams a message every 10 ms until the file `go` exists in its working folder.
STREAM = "steps: 1000000\nstep_seconds: 0.01\nuntil: go\nanswer: agent {n} done"
AGENTS = 4


@pytest.fixture
def busy_home() -> Iterator[tuple[Home, dict[str, object]]]:
    settings: dict[str, object] = {"stall": 60.0, "buffer": 4 * 1024 * 1024}
    home = make_home("")  # the config is written by the test, before the daemon starts
    yield home, settings
    remove_home(home)


def start_daemon(home: Home, settings: dict[str, object]) -> DaemonProcess:
    (home.root / "config.toml").write_text(CONFIG.format(**settings))
    return DaemonProcess(home).start()


@contextmanager
def write_lock(home: Home) -> Iterator[None]:
    """The database's write lock, held by a connection of the test until the block ends."""
    conn = sqlite3.connect(home.db_path, isolation_level=None, timeout=120)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def execution(home: Home, agent_id: str) -> sqlite3.Row:
    return db_rows(home, "SELECT * FROM executions WHERE agent_id = ?", (agent_id,))[0]


def supervisor_log(home: Home, agent: dict) -> str:
    path = home.execution_dir(agent["id"], agent["execution"]["id"]) / "supervisor.log"
    return path.read_text() if path.exists() else ""


def stored_steps(home: Home, agent_id: str) -> list[str]:
    rows = db_rows(
        home,
        "SELECT content FROM messages WHERE agent_id = ? AND content LIKE 'step %' ORDER BY id",
        (agent_id,),
    )
    return [row["content"] for row in rows]


def streamed_steps(home: Home, agent: dict) -> list[str]:
    """The step messages the engine wrote on its stdout, as the supervisor read them."""
    raw = home.execution_dir(agent["id"], agent["execution"]["id"]) / "runtime.jsonl"
    steps = []
    for line in raw.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") != "assistant":
            continue
        for block in event["message"]["content"]:
            if block.get("type") == "text" and block["text"].startswith("step "):
                steps.append(block["text"])
    return steps


def alive(home: Home, agent_id: str) -> bool:
    row = execution(home, agent_id)
    identity = ProcessIdentity(row["supervisor_pid"], row["supervisor_start_ticks"], row["boot_id"])
    return liveness(identity) is Liveness.ALIVE


def engine_ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def start_streaming(daemon: DaemonProcess, workdir: Path) -> list[dict]:
    agents = [
        daemon.call("start", {"task": STREAM.format(n=n), "workdir": str(workdir)})
        for n in range(AGENTS)
    ]
    for agent in agents:
        wait_for(
            lambda agent=agent: len(stored_steps(daemon.home, agent["id"])) >= 3,
            timeout=60,
            what="the agent streaming",
        )
    return agents


def check_every_step_stored_once(home: Home, agents: list[dict]) -> None:
    for n, agent in enumerate(agents):
        row = execution(home, agent["id"])
        assert row["state"] == "succeeded", (row["state"], supervisor_log(home, agent)[-2000:])
        stored, streamed = stored_steps(home, agent["id"]), streamed_steps(home, agent)
        assert len(streamed) >= 3
        assert stored == streamed  # each in order, none twice, none missing
        assert stored == [f"step {i}/1000000" for i in range(1, len(stored) + 1)]
        assert row["answer_bytes"] == len(f"agent {n} done")


def test_agents_finish_and_end_while_the_write_lock_is_held_past_their_busy_timeout(
    busy_home, workdir
):
    """The lock is taken while the agents stream and held until every engine has exited, so
    their events and their ends (terminal row, sealed answer) wait in their supervisors; once
    it is released every agent ends `succeeded` with every step it streamed stored once.
    Before, each supervisor's first write past 0.2 s raised "database is locked": the
    supervisor failed, and as its last write failed too, its agent was later called `lost`."""
    home, settings = busy_home
    daemon = start_daemon(home, settings)
    try:
        agents = start_streaming(daemon, workdir)
        engines = [execution(home, agent["id"])["engine_pid"] for agent in agents]
        with write_lock(home):
            locked = time.monotonic()
            (workdir / "go").touch()  # the engines answer and exit, their ends held
            for pid in engines:
                wait_for(lambda pid=pid: engine_ended(pid), timeout=60, what="the engine to end")
            # Held for ten busy timeouts at least: a supervisor that gave up would have by now.
            wait_for(lambda: time.monotonic() - locked > 2.0, timeout=10, what="2 s locked")
            for agent in agents:  # none gave up: each still waits to record its end
                assert alive(home, agent["id"])
                assert execution(home, agent["id"])["state"] == "running"
        for agent in agents:
            daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
        check_every_step_stored_once(home, agents)
        for agent in agents:
            busy = db_rows(
                home,
                "SELECT data FROM events WHERE agent_id = ? AND kind = 'store_busy'",
                (agent["id"],),
            )
            assert busy and json.loads(busy[-1]["data"])["attempts"] >= 1
            assert "store_recovered:" in supervisor_log(home, agent)
    finally:
        daemon.stop()


def test_a_full_outbox_stops_reading_the_engine_until_the_lock_is_released(busy_home, workdir):
    """With a 4 KiB outbox, a few dozen held steps fill it: the supervisor then reads nothing
    more (the engine waits on its pipe; runtime.jsonl stops growing) instead of holding more
    in memory, and that pause, longer than the 2 s stall window, is not the engine's silence."""
    home, settings = busy_home
    settings.update(stall=2.0, buffer=4096)
    daemon = start_daemon(home, settings)
    try:
        agents = start_streaming(daemon, workdir)
        with write_lock(home):
            for agent in agents:
                wait_for(
                    lambda agent=agent: "its whole buffer" in supervisor_log(home, agent),
                    timeout=60,
                    what="the supervisor's outbox filling up",
                )
            # Lines read before the outbox filled reach runtime.jsonl at the next try (at most
            # 1.2 s apart); after that nothing more is read.
            paused = time.monotonic()
            wait_for(lambda: time.monotonic() - paused > 1.5, timeout=10, what="1.5 s")
            read_then = [len(streamed_steps(home, agent)) for agent in agents]
            wait_for(lambda: time.monotonic() - paused > 4.5, timeout=10, what="3 s more")
            assert [len(streamed_steps(home, agent)) for agent in agents] == read_then
            (workdir / "go").touch()
        for agent in agents:
            daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
        check_every_step_stored_once(home, agents)
    finally:
        daemon.stop()


def test_a_supervisor_waits_out_the_lock_to_record_its_identity(busy_home, workdir):
    """The supervisor's first write, taking the row with its identity, waits for the lock."""
    from tests.test_admission import admit_without_spawning

    home, settings = busy_home
    (home.root / "config.toml").write_text(CONFIG.format(**settings))
    agent_id, execution_id = admit_without_spawning(home, "answer: taken late", workdir)
    log = home.execution_dir(agent_id, execution_id) / "supervisor.log"
    with write_lock(home), open(log, "ab") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "agent_run.supervisor", "--home", str(home.root)]
            + ["--execution", execution_id],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=out,
            env={"PATH": "/usr/bin:/bin"},
            start_new_session=True,
        )
        supervisor.stdin.write(b'{"secrets": {}}\n')
        supervisor.stdin.close()
        wait_for(
            lambda: "store_busy:" in log.read_text() or supervisor.poll() is not None,
            timeout=60,
            what="a locked try",
        )
        assert supervisor.poll() is None, log.read_text()[-2000:]
    assert supervisor.wait(timeout=60) == 0, log.read_text()[-2000:]
    row = db_rows(home, "SELECT state FROM executions WHERE id = ?", (execution_id,))[0]
    assert row["state"] == "succeeded", log.read_text()[-2000:]


def test_a_supervisor_killed_while_the_database_is_locked_is_lost_naming_the_lock(
    busy_home, workdir
):
    """What the daemon sees of a supervisor that died before it could write its end: its row
    still running, its process gone; reconciliation names the lock it was waiting for."""
    home, settings = busy_home
    daemon = start_daemon(home, settings)
    try:
        agent = daemon.call("start", {"task": STREAM.format(n=0), "workdir": str(workdir)})
        wait_for(lambda: len(stored_steps(home, agent["id"])) >= 3, what="the agent streaming")
        with write_lock(home):
            wait_for(
                lambda: "store_busy:" in supervisor_log(home, agent),
                timeout=60,
                what="the supervisor finding the database locked",
            )
            os.kill(execution(home, agent["id"])["supervisor_pid"], signal.SIGKILL)
        done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
        assert done["state"] == "lost"
        assert "waiting for the database's write lock" in done["execution"]["failure_message"]
    finally:
        daemon.stop()


def test_a_worker_tool_call_waits_out_the_lock(busy_home, workdir):
    """A worker tool's report (`finish`) is recorded once the lock is released, not failed."""
    from agent_run.store.db import connect, set_busy_timeout, write
    from agent_run.worker_tools.binding import token_hash
    from agent_run.worker_tools.server import record
    from tests.test_admission import admit_without_spawning

    home, settings = busy_home
    (home.root / "config.toml").write_text(CONFIG.format(**settings))
    _agent_id, execution_id = admit_without_spawning(home, "answer: x", workdir)
    conn = connect(home.db_path)
    with write(conn):
        conn.execute(
            "UPDATE executions SET worker_token_sha256 = ? WHERE id = ?",
            (token_hash("the-token"), execution_id),
        )
    set_busy_timeout(conn, 0.2)
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(record(conn, execution_id, "the-token", "finish", {"summary": "s"}))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            outcome.append(exc)

    try:
        with write_lock(home):
            caller = threading.Thread(target=call)
            caller.start()
            locked = time.monotonic()
            wait_for(lambda: time.monotonic() - locked > 2.0 or outcome, what="2 s locked")
            assert not outcome, outcome  # still waiting, not failed
        caller.join(30)
        assert outcome and isinstance(outcome[0], int), outcome
    finally:
        conn.close()
    rows = db_rows(home, "SELECT tool FROM tool_reports WHERE execution_id = ?", (execution_id,))
    assert [row["tool"] for row in rows] == ["finish"]


def test_the_spawner_waits_for_a_supervisor_that_waits_for_the_lock(busy_home, workdir):
    """A lock held past the spawner's 30 s wait for the ready line: the daemon boots and
    spawns the admitted agent's supervisor, which waits to record its identity; the spawner
    sees it say so in its log and keeps waiting instead of failing it `supervisor not ready`.
    (The daemon boots under the lock: it writes nothing until it has to.)"""
    from agent_run.supervisor.launch import READY_TIMEOUT_SECONDS
    from tests.test_admission import admit_without_spawning

    home, settings = busy_home
    (home.root / "config.toml").write_text(CONFIG.format(**settings))
    agent_id, execution_id = admit_without_spawning(home, "answer: taken late", workdir)
    log = home.execution_dir(agent_id, execution_id) / "supervisor.log"
    daemon = None
    try:
        with write_lock(home):
            locked = time.monotonic()
            daemon = DaemonProcess(home).start()
            wait_for(
                lambda: log.exists() and "store_busy:" in log.read_text(),
                timeout=60,
                what="the supervisor waiting for the lock",
            )
            wait_for(
                lambda: time.monotonic() - locked > READY_TIMEOUT_SECONDS + 5,
                timeout=READY_TIMEOUT_SECONDS + 30,
                what="the spawner's wait to pass",
            )
        done = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 50})["agent"]
        assert done["state"] == "succeeded", done["execution"]["failure_message"]
    finally:
        if daemon is not None:
            daemon.stop()
