"""The platform seam for process identity: the Linux table (/proc, SO_PEERCRED) and the psutil
one (macOS and the rest), both run here against real processes: a live child, a zombie, a
reaped one, a process group, a real unix socket pair."""

import os
import signal
import socket
import struct
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from agent_run.system.processes import Liveness, ProcessIdentity, current
from agent_run.system.processes.linux import LinuxProcesses
from agent_run.system.processes.portable import BOOT_PREFIX, PsutilProcesses, parse_xucred
from tests.harness import wait_for

TABLES = [LinuxProcesses(), PsutilProcesses()]


@pytest.fixture(params=TABLES, ids=lambda t: t.name)
def table(request):
    return request.param


@pytest.fixture
def child():
    marker = f"identity-test-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(120)", marker], start_new_session=True
    )
    # Popen returns once exec closed its close-on-exec pipe, which is before the kernel has set
    # up the new command line: /proc/PID/cmdline reads empty for a moment after that.
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    wait_for(lambda: marker.encode() in cmdline.read_bytes(), what="the child's command line")
    yield proc, marker
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _zombie_state(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_linux_is_the_table_chosen_here():
    assert current().name == "linux"


def test_the_same_process_has_the_same_identity_and_lives(table, child):
    proc, _ = child
    first = ProcessIdentity.of(proc.pid, table)
    assert first is not None and first == ProcessIdentity.of(proc.pid, table)
    assert first.boot_id == table.boot_id()
    assert table.liveness(first) is Liveness.ALIVE
    assert table.liveness(ProcessIdentity.of(os.getpid(), table)) is Liveness.ALIVE


def test_another_start_time_is_another_process(table, child):
    proc, _ = child
    identity = ProcessIdentity.of(proc.pid, table)
    shift = table.start_tolerance + 500
    assert (
        table.liveness(replace(identity, start_ticks=identity.start_ticks + shift)) is Liveness.DEAD
    )
    assert (
        table.liveness(replace(identity, start_ticks=identity.start_ticks - shift)) is Liveness.DEAD
    )


def test_another_boot_is_death(table, child):
    proc, _ = child
    identity = ProcessIdentity.of(proc.pid, table)
    other = (
        str(uuid.uuid4())
        if table.name == "linux"
        else f"{BOOT_PREFIX}{int(identity.boot_id.removeprefix(BOOT_PREFIX)) - 3600}"
    )
    assert table.liveness(replace(identity, boot_id=other)) is Liveness.DEAD


def test_a_zombie_and_a_reaped_process_are_dead(table, child):
    proc, _ = child
    identity = ProcessIdentity.of(proc.pid, table)
    os.kill(proc.pid, signal.SIGKILL)
    wait_for(lambda: _zombie_state(proc.pid), what="the child to become a zombie")
    assert table.liveness(identity) is Liveness.DEAD  # exited, not yet reaped
    proc.wait()
    assert table.start_time(proc.pid) is None
    assert ProcessIdentity.of(proc.pid, table) is None
    assert table.liveness(identity) is Liveness.DEAD


def test_both_tables_agree_on_the_same_processes(child):
    proc, _ = child
    identities = [ProcessIdentity.of(proc.pid, t) for t in TABLES]
    assert [t.liveness(i) for t, i in zip(TABLES, identities, strict=True)] == [Liveness.ALIVE] * 2
    proc.kill()
    proc.wait()
    assert [t.liveness(i) for t, i in zip(TABLES, identities, strict=True)] == [Liveness.DEAD] * 2


def test_an_identity_the_psutil_table_did_not_make_is_unknown_not_dead(child):
    proc, _ = child
    table = PsutilProcesses()
    identity = ProcessIdentity.of(proc.pid, table)
    assert table.liveness(replace(identity, boot_id=str(uuid.uuid4()))) is Liveness.UNKNOWN


def test_group_members_and_command_lines(table, child):
    proc, marker = child  # its own session: its pid is its process group
    assert table.group_members(proc.pid) == [proc.pid]
    argv = dict(table.command_lines())[proc.pid]
    assert argv[-1] == marker and argv[1] == "-c"
    proc.kill()
    proc.wait()
    assert table.group_members(proc.pid) == []
    assert proc.pid not in dict(table.command_lines())


def test_children_are_the_processes_whose_parent_is_the_pid(table, child):
    proc, _marker = child
    assert proc.pid in table.children(os.getpid())
    assert table.children(proc.pid) == []  # it started none


def test_peer_credentials_of_a_real_unix_socket(table):
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        creds = table.peer_credentials(left)
    assert (creds.pid, creds.uid, creds.gid) == (os.getpid(), os.getuid(), os.getgid())


def test_peer_credentials_across_processes(table, tmp_path):
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)
        peer = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import socket, sys, time; s = socket.socket(socket.AF_UNIX);"
                f" s.connect({path!r}); sys.stdin.read()",
            ],
            stdin=subprocess.PIPE,
        )
        try:
            conn, _ = server.accept()
            with conn:
                assert table.peer_credentials(conn).pid == peer.pid
        finally:
            peer.communicate(b"")


def test_macos_xucred_is_parsed_by_its_layout():
    raw = struct.pack("=IIh2x16I", 0, 501, 2, 20, 12, *([0] * 14))
    assert parse_xucred(raw) == (501, 20)
    assert parse_xucred(struct.pack("=IIh2x16I", 0, 0, 0, *([0] * 16))) == (0, -1)


def test_an_ended_group_is_known_empty_without_reading_the_table(table, child, monkeypatch):
    """The kernel says at once that no process is left in a group (the engine's, after it
    ended): no scan of every process on the machine for it."""
    proc, _marker = child
    proc.kill()
    proc.wait()

    def no_scan(*args, **kwargs):
        raise AssertionError("the process table was scanned")

    monkeypatch.setattr(os, "scandir", no_scan)
    monkeypatch.setattr("psutil.process_iter", no_scan)
    assert table.group_members(proc.pid) == []


ADOPTER = r"""
import os, subprocess, sys, time
from agent_run.system.processes import current, reap_group_zombies
from agent_run.system.processes.base import no_such_group

adopted = current().adopt_orphans() if sys.argv[1] == "adopt" else False
# A group whose leader leaves a child behind, as bubblewrap leaves its own init or a tool a
# background process: the leader exits at once, its child a moment later.
leader = subprocess.Popen(
    ["sh", "-c", "sleep 0.5 & echo $!"], start_new_session=True, stdout=subprocess.PIPE
)
orphan = int(leader.stdout.readline())
leader.wait()


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


deadline = time.monotonic() + 30
parent = parent_of(orphan)
while parent == leader.pid:  # reparented as its parent exits (done by the time it is reaped)
    assert time.monotonic() < deadline
    time.sleep(0.01)
    parent = parent_of(orphan)
while os.path.exists(f"/proc/{orphan}/stat"):  # until it has ended (a zombie, or reaped)
    with open(f"/proc/{orphan}/stat") as fh:
        if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    assert time.monotonic() < deadline
    time.sleep(0.02)
reap_group_zombies(leader.pid)
print(adopted, parent == os.getpid(), no_such_group(leader.pid))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="PR_SET_CHILD_SUBREAPER is Linux only; elsewhere adopt_orphans is False (tested)",
)
def test_a_subreaper_adopts_its_engines_orphans_so_their_ended_group_needs_no_table_scan():
    """A supervisor is its engine's orphans' subreaper: their zombies are its own to reap as the
    engine ends, so the kernel says the group has ended (no /proc scan), where init here reaps
    orphans only every few seconds."""
    adopting = subprocess.run(
        [sys.executable, "-c", ADOPTER, "adopt"], capture_output=True, text=True, timeout=60
    )
    assert adopting.returncode == 0, adopting.stderr
    assert adopting.stdout.split() == ["True", "True", "True"]
    plain = subprocess.run(
        [sys.executable, "-c", ADOPTER, "plain"], capture_output=True, text=True, timeout=60
    )
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split()[:2] == ["False", "False"]  # init's child, not ours to reap


def test_the_portable_table_has_no_subreaper():
    assert PsutilProcesses().adopt_orphans() is False


REAPER = r"""
import subprocess, sys
from agent_run.engines.base import LaunchSpec
from agent_run.supervisor.engine_process import EngineProcess
from agent_run.supervisor.identity import adopt_orphans

assert adopt_orphans()
# An engine that ends while a child of its group still runs for `linger` seconds: bubblewrap's
# own init tearing its namespaces down as the bwrap that reported the exit is gone, or a leak.
linger, settle = sys.argv[1], float(sys.argv[2])
engine = EngineProcess.start(
    LaunchSpec(argv=["sh", "-c", f"sleep {linger} & exit 0"], env={"PATH": "/usr/bin:/bin"},
               cwd="/", stdin_pipe=False)
)
engine.wait(5)
gone, survivors = engine.reap_group(settle=settle)
print(gone, len(survivors))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="PR_SET_CHILD_SUBREAPER is Linux only; elsewhere adopt_orphans is False (tested)",
)
@pytest.mark.parametrize(
    "linger, settle, said",
    [
        ("0.1", "20", ["True", "0"]),  # it ended by itself: no survivor, nothing killed
        ("300", "0.2", ["True", "1"]),  # a leftover: killed once the settle time is up
    ],
)
def test_an_engines_group_that_ends_by_itself_is_not_reported_as_killed(linger, settle, said):
    """What is left of an engine's group is killed and reported as `group_killed`; a member that
    was already ending (bubblewrap's own init, a few ms behind) is waited for, not reported."""
    result = subprocess.run(
        [sys.executable, "-c", REAPER, linger, settle], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == said


def test_the_linux_table_counts_a_threads_run_queue_wait_and_psutil_says_it_cannot():
    """Two busy processes pinned to one CPU take turns: each waits on the run queue while the
    other runs, and the Linux table counts it per thread, runnable; psutil cannot say (None:
    unknown, never evidence of starvation)."""
    cpu = min(os.sched_getaffinity(0))
    busy = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
        )
        for _ in range(2)
    ]
    try:
        table = LinuxProcesses()
        pids = [proc.pid for proc in busy]

        def waited() -> bool:
            threads = table.threads_sched(pids) or {}
            return len(threads) == 2 and all(t.waited_ns > 0.2e9 for t in threads.values())

        wait_for(waited, timeout=30, what="each to have waited for the CPU")
        threads = table.threads_sched(pids)
        assert set(threads) == set(pids)  # one thread each, keyed by thread id
        assert all(t.runnable and t.ran_ns > 0 for t in threads.values())
        assert table.threads_sched([busy[0].pid + 10**7]) == {}  # no such process: left out
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    assert PsutilProcesses().threads_sched(pids) is None
