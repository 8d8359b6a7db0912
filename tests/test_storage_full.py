"""A full disk, caused for real: the home lives on an 8 MiB tmpfs that the test fills with zeros."""

import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.domain.errors import StorageFull
from agent_run.supervisor.ending import seal_verified
from agent_run.system.home import Home
from tests.harness import DaemonProcess, db_rows, kill_leftovers, short_tmpdir, wait_for

CONFIG = """schema_version = 1
default_runtime = "demo"
[supervisor]
stall_seconds = 120.0
cancel_grace_seconds = 1.0
storage_buffer_bytes = {buffer}
storage_wait_seconds = 60.0
[daemon]
reconcile_interval_seconds = 0.2
[runtimes.demo]
engine = "demo"
models = ["demo-1"]
default_model = "demo-1"
"""
# A message long enough that a few dozen of them exhaust a small buffer.
STREAM = "steps: {steps}\nstep_seconds: 0.1\nanswer: streamed to the end\n" + "padding " * 200


class Tmpfs:
    """An 8 MiB tmpfs mounted on a temp folder of its own."""

    def __init__(self) -> None:
        self.root = short_tmpdir("arf-")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(self.root)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            self.root.rmdir()
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        self.filler = self.root / "zeros"

    def fill(self) -> int:
        """Write zeros until the filesystem refuses with ENOSPC; the bytes written."""
        written = 0
        with open(self.filler, "ab", buffering=0) as fh:
            block = b"\0" * 65536
            while True:
                try:
                    count = fh.write(block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
                written += count or 0
                if count is not None and count < len(block):
                    block = block[: max(1, len(block) - count)]
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.root)], check=False)
        self.root.rmdir()


@pytest.fixture
def tmpfs() -> Iterator[Tmpfs]:
    if os.geteuid() != 0:
        pytest.skip("mounting a real tmpfs needs root (CI runs the suite as root)")
    fs = Tmpfs()
    yield fs
    fs.unmount()


def tmpfs_daemon(fs: Tmpfs, buffer: int = 4 * 1024 * 1024) -> DaemonProcess:
    home = Home(fs.root / "h").ensure()
    (home.root / "config.toml").write_text(CONFIG.format(buffer=buffer))
    return DaemonProcess(home)


@pytest.fixture
def running(tmpfs: Tmpfs) -> Iterator[tuple[Tmpfs, list[DaemonProcess]]]:
    made: list[DaemonProcess] = []
    yield tmpfs, made
    for daemon in made:
        daemon.stop()
        kill_leftovers(daemon.home)


def workdir_on(fs: Tmpfs) -> Path:
    path = fs.root / "w"
    path.mkdir(exist_ok=True)
    return path


def events_of(home: Home, agent_id: str, kind: str) -> list:
    return db_rows(
        home, "SELECT * FROM events WHERE agent_id = ? AND kind = ? ORDER BY seq", (agent_id, kind)
    )


def test_start_on_a_full_disk_is_storage_full_and_leaves_no_row(running):
    fs, made = running
    daemon = tmpfs_daemon(fs).start()
    made.append(daemon)
    fs.fill()
    with pytest.raises(StorageFull) as info, daemon.client() as client:
        client.call("start", {"task": "answer: never", "workdir": str(workdir_on(fs))})
    assert "new agent" in info.value.details["writing"]
    assert db_rows(daemon.home, "SELECT count(*) AS n FROM agents")[0]["n"] == 0
    assert db_rows(daemon.home, "SELECT count(*) AS n FROM executions")[0]["n"] == 0
    fs.free()  # and once space returns, the same request is admitted and runs
    agent = daemon.call("start", {"task": "answer: after", "workdir": str(workdir_on(fs))})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    assert done["agent"]["state"] == "succeeded"


def test_a_disk_that_fills_then_frees_loses_no_event(running):
    fs, made = running
    daemon = tmpfs_daemon(fs).start()
    made.append(daemon)
    agent = daemon.call("start", {"task": STREAM.format(steps=100), "workdir": str(workdir_on(fs))})
    wait_for(
        lambda: len(events_of(daemon.home, agent["id"], "message")) >= 5,
        timeout=60,
        what="the agent to stream",
    )
    fs.fill()
    wait_for(
        lambda: (
            (daemon.home.execution_dir(agent["id"], agent["execution"]["id"]) / "supervisor.log")
            .read_text()
            .count("storage_full:")
        ),
        timeout=30,
        what="the supervisor to hit the full disk",
    )
    # While full, it stays running: nothing is guessed lost while its supervisor lives.
    assert daemon.call("agent", {"agent_id": agent["id"]})["state"] == "running"
    fs.free()
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})["agent"]
    engine_log = daemon.home.execution_dir(agent["id"], agent["execution"]["id"]) / "engine.log"
    assert done["state"] == "succeeded", (
        done["execution"]["failure_message"],
        engine_log.read_text()[-1500:],
    )
    progress = [
        r
        for r in db_rows(daemon.home, "SELECT * FROM messages WHERE agent_id = ?", (agent["id"],))
        if "step" in r["content"]
    ]
    assert len(progress) == 100  # every step the engine streamed is in the transcript
    assert events_of(daemon.home, agent["id"], "storage_full")
    assert events_of(daemon.home, agent["id"], "storage_recovered")
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "streamed to the end"


def test_a_disk_that_stays_full_ends_failed_storage_full_not_lost(running):
    fs, made = running
    daemon = tmpfs_daemon(fs, buffer=16384).start()
    made.append(daemon)
    agent = daemon.call("start", {"task": STREAM.format(steps=400), "workdir": str(workdir_on(fs))})
    wait_for(
        lambda: len(events_of(daemon.home, agent["id"], "message")) >= 3,
        timeout=60,
        what="the agent to stream",
    )
    fs.fill()
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})["agent"]
    assert done["state"] == "failed", done
    assert done["failure_kind"] == "storage_full"
    assert "disk stayed full" in done["execution"]["failure_message"]
    assert "free space" in done["execution"]["failure_advice"]
    directory = daemon.home.execution_dir(agent["id"], agent["execution"]["id"])
    assert not (directory / "answer.md").exists()
    assert not (directory / ".storage-reserve").exists()
    assert "storage_full:" in (directory / "supervisor.log").read_text()
    assert "storage_full" in daemon.call("doc", {"topic": "failures"})["text"]


def test_sealing_on_a_full_disk_never_leaves_a_truncated_answer(tmpfs):
    directory = tmpfs.root / "ex"
    directory.mkdir()
    tmpfs.fill()
    # Free a little: the answer starts to be written, then the disk fills mid-write.
    with open(tmpfs.filler, "r+b") as fh:
        fh.truncate(fh.seek(0, os.SEEK_END) - 64 * 1024)
    with pytest.raises(StorageFull) as info:
        seal_verified(directory, "x" * (512 * 1024), agent_id="ag_1", execution_id="ex_1")
    assert "answer.md" in info.value.details["writing"]
    assert sorted(p.name for p in directory.iterdir()) == []  # no answer.md, no temp file
    tmpfs.free()
    sealed = seal_verified(directory, "x" * (512 * 1024), agent_id="ag_1", execution_id="ex_1")
    assert sealed["answer_bytes"] == 512 * 1024 == (directory / "answer.md").stat().st_size


def test_reconciliation_names_a_full_disk_the_dead_supervisor_reported(running):
    fs, made = running
    daemon = tmpfs_daemon(fs).start()
    made.append(daemon)
    agent = daemon.call("start", {"task": STREAM.format(steps=200), "workdir": str(workdir_on(fs))})
    wait_for(
        lambda: len(events_of(daemon.home, agent["id"], "message")) >= 3,
        timeout=60,
        what="the agent to stream",
    )
    fs.fill()
    log = daemon.home.execution_dir(agent["id"], agent["execution"]["id"]) / "supervisor.log"
    wait_for(
        lambda: "storage_full:" in log.read_text(),
        timeout=30,
        what="the supervisor to hit the full disk",
    )
    row = db_rows(
        daemon.home, "SELECT * FROM executions WHERE id = ?", (agent["execution"]["id"],)
    )[0]
    os.kill(row["supervisor_pid"], signal.SIGKILL)  # it dies holding its events in memory
    fs.free()
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "lost"
    assert "the disk was full" in done["execution"]["failure_message"], done["execution"][
        "failure_message"
    ]


def test_held_events_too_big_for_the_reserve_are_dropped_and_counted(running):
    fs, made = running
    daemon = tmpfs_daemon(fs, buffer=1024 * 1024).start()
    made.append(daemon)
    fast = "steps: 100000\nstep_seconds: 0.001\nanswer: never reached"
    agent = daemon.call("start", {"task": fast, "workdir": str(workdir_on(fs))})
    wait_for(
        lambda: len(events_of(daemon.home, agent["id"], "message")) >= 3,
        timeout=60,
        what="the agent to stream",
    )
    fs.fill()
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})["agent"]
    assert done["state"] == "failed" and done["failure_kind"] == "storage_full", done["execution"]
    assert "buffered row(s) could not be stored" in done["execution"]["failure_message"]


def test_an_engine_that_dies_of_a_full_disk_ends_storage_full_not_engine_crashed(running):
    """The engine streams, the disk fills, then it writes 200 KB to stderr (more than its pipe
    holds) and a file, which fails with ENOSPC: it crashes with a traceback. The stderr thread
    keeps draining though engine.log cannot grow (before, it died on the first OSError and the
    engine then blocked on its full stderr pipe until the stall window), and the run ends
    `storage_full` naming the evidence, not `engine_crashed`."""
    fs, made = running
    daemon = tmpfs_daemon(fs).start()
    made.append(daemon)
    workdir = workdir_on(fs)
    (workdir / "go.later").touch()  # renamed to `go` once the disk is full (no space needed)
    task = (
        "steps: 100000\nstep_seconds: 0.05\nuntil: go\nstderr: 200000\n"
        "write: out.txt = never stored\nanswer: never reached"
    )
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    wait_for(
        lambda: len(events_of(daemon.home, agent["id"], "message")) >= 3,
        timeout=60,
        what="the agent to stream",
    )
    fs.fill()
    (workdir / "go.later").rename(workdir / "go")
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})["agent"]
    log = daemon.home.execution_dir(agent["id"], agent["execution"]["id"]) / "supervisor.log"
    assert (done["state"], done["failure_kind"]) == ("failed", "storage_full"), (
        done["execution"]["failure_message"],
        log.read_text()[-2000:],
    )
    message = done["execution"]["failure_message"]
    assert "without completing, on a full disk" in message
    assert "No space left on device" in message  # the engine's own words, from its stderr
    assert "engine.log: No space left on device" in log.read_text()
