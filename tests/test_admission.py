"""Admission is durable: an admitted agent is never lost because its daemon (or spawner) died,
and one execution never gets two running supervisors."""

import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path

from agent_run.config.model import load_config
from agent_run.domain.errors import DaemonUnavailable, SpawnFailed
from agent_run.domain.requests import StartParams
from agent_run.rpc.client import RawClient
from agent_run.services.agents import admission_rows
from agent_run.services.context import ServiceContext
from agent_run.store.agents import insert_agent_with_execution
from agent_run.store.db import connect, write
from agent_run.supervisor.launch import spawn_supervisor, supervisor_argv
from agent_run.system.home import Home
from tests.harness import DaemonProcess, db_rows, raw_socket, wait_for


def admit_without_spawning(home: Home, task: str, workdir: Path) -> tuple[str, str]:
    """Commit an agent exactly as `start` does, and spawn nothing: a daemon that died right after
    its admission commit. Returns (agent_id, execution_id)."""
    ctx = ServiceContext(home, load_config(home), threads=1)
    try:
        agent_row, execution = admission_rows(ctx, StartParams(task=task, workdir=str(workdir)))
    finally:
        ctx.shutdown()
    conn = connect(home.db_path)
    try:
        with write(conn):
            insert_agent_with_execution(conn, agent=agent_row, execution=execution)
    finally:
        conn.close()
    home.execution_dir(agent_row["id"], execution["id"]).mkdir(parents=True, exist_ok=True)
    return agent_row["id"], execution["id"]


def execution_states(home: Home, agent_id: str) -> list[str]:
    return [
        json.loads(r["data"])["state"]
        for r in db_rows(
            home,
            "SELECT data FROM events WHERE agent_id = ? AND kind = 'state' ORDER BY seq",
            (agent_id,),
        )
    ]


def test_admitted_but_never_spawned_execution_is_spawned_at_boot(home, workdir):
    agent_id, _ = admit_without_spawning(home, "answer: spawned at boot", workdir)
    daemon = DaemonProcess(home).start()
    try:
        result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
        assert result["agent"]["state"] == "succeeded", result
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == "spawned at boot"
    finally:
        daemon.stop()
    assert execution_states(home, agent_id) == ["created", "starting", "running", "succeeded"]


def test_orphan_found_by_periodic_reconciliation_is_spawned_not_lost(daemon, home, workdir):
    # Committed behind the running daemon's back: not in its in-flight set, no supervisor.
    agent_id, _ = admit_without_spawning(home, "answer: adopted", workdir)
    result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    assert result["agent"]["state"] == "succeeded", result
    assert daemon.call("answer", {"agent_id": agent_id})["text"] == "adopted"
    assert "lost" not in execution_states(home, agent_id)


def test_two_supervisors_for_one_execution_only_one_runs_it(home, workdir):
    agent_id, execution_id = admit_without_spawning(
        home, "steps: 3\nstep_seconds: 0.05\nanswer: once", workdir
    )
    log = home.execution_dir(agent_id, execution_id) / "supervisor.log"
    outcomes: list[object] = []
    barrier = threading.Barrier(2)

    def spawn() -> None:
        barrier.wait()
        try:
            outcomes.append(spawn_supervisor(home, execution_id, log))
        except SpawnFailed as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=spawn) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(type(o).__name__ for o in outcomes) == ["ProcessIdentity", "SpawnFailed"], (
        outcomes
    )
    wait_for(
        lambda: (
            db_rows(home, "SELECT state FROM executions WHERE id = ?", (execution_id,))[0]["state"]
            == "succeeded"
        ),
        timeout=60,
        what="the one supervisor to finish",
    )
    assert execution_states(home, agent_id) == ["created", "starting", "running", "succeeded"]


def test_supervisor_keeps_running_when_its_spawner_died_before_the_ready_line(home, workdir):
    agent_id, execution_id = admit_without_spawning(
        home, "steps: 3\nstep_seconds: 0.05\nanswer: orphaned", workdir
    )
    read_fd, write_fd = os.pipe()
    os.close(read_fd)  # the spawner is gone: writing the ready line gets EPIPE
    log = open(home.execution_dir(agent_id, execution_id) / "supervisor.log", "ab")
    try:
        proc = subprocess.Popen(
            supervisor_argv(home, execution_id, write_fd),
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    finally:
        os.close(write_fd)
        log.close()
    assert proc.wait(timeout=60) == 0, (
        home.execution_dir(agent_id, execution_id) / "supervisor.log"
    ).read_text()
    row = db_rows(
        home, "SELECT state, answer_sha256 FROM executions WHERE id = ?", (execution_id,)
    )[0]
    assert row["state"] == "succeeded" and row["answer_sha256"]


def test_starts_admitted_together_share_a_transaction_but_not_their_errors(daemon, home, workdir):
    """40 starts pipelined on one connection are admitted in one group: repeats of a request_id
    get its one agent, a different payload under that id gets Conflict, the rest are unaffected."""
    lines = []
    for n in range(40):
        if n % 4 == 0:  # ten repeats of one request
            params = {"task": "answer: same", "request_id": "same"}
        elif n == 39:  # that request_id with another payload
            params = {"task": "answer: other", "request_id": "same"}
        else:
            params = {"task": f"answer: own {n}", "request_id": f"own-{n}"}
        lines.append(
            {
                "jsonrpc": "2.0",
                "id": n,
                "method": "start",
                "params": {**params, "workdir": str(workdir)},
            }
        )
    sock = raw_socket(home)
    sock.sendall(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    reader = sock.makefile("rb")
    replies = {r["id"]: r for r in (json.loads(reader.readline()) for _ in lines)}
    sock.close()
    same = {replies[n]["result"]["id"] for n in range(0, 40, 4)}
    assert len(same) == 1, same
    assert replies[39]["error"]["data"]["code"] == "Conflict", replies[39]
    own = {n: replies[n]["result"]["id"] for n in range(40) if n % 4 and n != 39}
    assert len(set(own.values())) == len(own) == 29
    for n, agent_id in own.items():
        assert (
            daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 90})["agent"]["state"]
            == "succeeded"
        )
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == f"own {n}"
    assert len(db_rows(home, "SELECT id FROM agents")) == 30


# -- kill -9 of the daemon while starts are in flight -------------------------------------------

CLIENTS = 30
GENERATIONS = 5  # clients begin in waves: client i starts once daemon generation i % 5 is up
MIN_KILLS = 10


class Chaos:
    """A daemon killed -9 at random moments and restarted each time; clients that retry."""

    def __init__(self, home: Home, seed: int) -> None:
        self.home = home
        self.rng = random.Random(seed)
        self.daemon = DaemonProcess(home)
        self.generation = 0
        self.changed = threading.Condition()
        self.kills = 0

    def kill_and_restart(self, kills: int) -> None:
        self.daemon.start()
        for _ in range(kills):
            # A random moment in the daemon's life: mid-admission, mid-spawn, mid-reply.
            time.sleep(self.rng.uniform(0.0, 0.6))  # the fault's timing, not a synchronisation
            self.daemon.kill9()
            self.kills += 1
            self.daemon.start()
            with self.changed:
                self.generation += 1
                self.changed.notify_all()

    def start_with_retries(self, index: int, workdir: Path, ids: dict[int, str]) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.generation >= index % GENERATIONS, timeout=120)
        params = {
            "task": f"answer: agent {index}",
            "workdir": str(workdir),
            "request_id": f"req-{index}",
        }

        def attempt() -> str | None:
            try:
                with RawClient(self.home.socket_path, timeout=30) as client:
                    return client.call("start", params)["id"]
            except (OSError, DaemonUnavailable, json.JSONDecodeError):
                return None  # the daemon died under us: the same request_id again

        ids[index] = wait_for(attempt, timeout=90, interval=0.05, what=f"start of request {index}")


def test_kill9_of_the_daemon_during_concurrent_starts_loses_no_agent(home, workdir):
    seed = random.randrange(1 << 30)
    chaos = Chaos(home, seed)
    ids: dict[int, str] = {}
    clients = [
        threading.Thread(target=chaos.start_with_retries, args=(i, workdir, ids))
        for i in range(CLIENTS)
    ]
    killer = threading.Thread(target=chaos.kill_and_restart, args=(MIN_KILLS + 2,))
    killer.start()
    for t in clients:
        t.start()
    killer.join(timeout=100)
    for t in clients:
        t.join(timeout=100)
    try:
        assert chaos.kills >= MIN_KILLS, f"seed {seed}"
        assert sorted(ids) == list(range(CLIENTS)), f"seed {seed}: starts that never returned"
        for index, agent_id in ids.items():
            result = chaos.daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
            assert result["agent"]["state"] == "succeeded", (seed, result)
            assert chaos.daemon.call("answer", {"agent_id": agent_id})["text"] == f"agent {index}"
    finally:
        chaos.daemon.stop()
    agents = db_rows(
        home,
        "SELECT a.request_id, count(e.id) AS n FROM agents a JOIN executions e "
        "ON e.agent_id = a.id GROUP BY a.id",
    )
    assert sorted(r["request_id"] for r in agents) == sorted(f"req-{i}" for i in range(CLIENTS))
    assert all(r["n"] == 1 for r in agents), f"seed {seed}: an agent with several executions"
    lost = db_rows(
        home, "SELECT agent_id FROM events WHERE kind = 'state' AND data LIKE '%\"lost\"%'"
    )
    assert not lost, f"seed {seed}: {lost}"


def test_batch_start_runs_git_off_the_event_loop(home):
    """A `batch_start` stuck in `git rev-parse` (a slow disk, a huge repository) must not stop
    the daemon answering anyone else."""
    import shutil

    from tests.batch_harness import make_repo, wait_batch

    repo = make_repo()
    bin_dir = repo.parent / "bin"
    bin_dir.mkdir()
    gate = repo.parent / "gate"
    wrapper = bin_dir / "git"
    wrapper.write_text(f"""#!/bin/sh
case " $* " in  # after agent-run's own `-c` settings (git.NO_PROGRAMS)
  *" rev-parse --show-toplevel "*)
    touch {gate}.entered
    while [ ! -e {gate} ]; do sleep 0.05; done;;
esac
exec {shutil.which("git")} "$@"
""")
    wrapper.chmod(0o755)
    daemon = DaemonProcess(home, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}).start()
    started: dict[str, object] = {}

    def start_batch() -> None:
        started["batch"] = daemon.call(
            "batch_start",
            {
                "runtime": "demo",
                "workflow": "repeated",
                "project": str(repo),
                "runs": 1,
                "prompt": "answer: ok",
            },
        )

    thread = threading.Thread(target=start_batch)
    try:
        thread.start()
        wait_for(lambda: Path(f"{gate}.entered").exists(), what="batch_start to be inside git")
        with RawClient(home.socket_path, timeout=10) as client:
            assert client.call("ping")["pid"] == daemon.proc.pid
        assert "batch" not in started  # still held by git, and the daemon answered meanwhile
    finally:
        gate.touch()
        thread.join(timeout=60)
    try:
        assert wait_batch(daemon, started["batch"]["id"])["state"] == "completed"
    finally:
        daemon.stop()
        shutil.rmtree(repo.parent, ignore_errors=True)
