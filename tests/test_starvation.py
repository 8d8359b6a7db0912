"""A starved engine is not a stalled one. Beside CPU hogs on the same CPU, an engine at nice 19
is runnable but gets almost no CPU: the time it waits to run (the kernel's run-queue wait per
thread) is not counted as silence, and only a starvation three stall windows long ends it,
named `starved`. An engine that is silent beside the same hogs (it sleeps, as one facing a
provider that does not answer) is still `stalled`."""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.system.processes import current
from tests.harness import TEST_CONFIG, DaemonProcess, db_rows, make_home, remove_home, wait_for

pytestmark = [
    pytest.mark.xdist_group("cpu_hogs"),  # one of these at a time: their hogs add up
    pytest.mark.skipif(
        not Path("/proc/self/task").exists() or not Path("/proc/self/schedstat").exists(),
        reason="needs Linux /proc with schedstats",
    ),
]
CPU = min(os.sched_getaffinity(0))
# A nice-19 scheduling group gets ~1.5 % of a CPU beside one busy nice-0 group, ~0.25 % beside
# six: a few seconds for an engine's start-up (tens of ms of CPU). However many, they take one
# CPU from the rest of the machine.
HOGS = 6
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a process its priority back needs root"
)


def config(stall: float, nice: int) -> str:
    assert "stall_seconds = 60.0\n" in TEST_CONFIG and "nice = 0\n" in TEST_CONFIG
    return TEST_CONFIG.replace("stall_seconds = 60.0\n", f"stall_seconds = {stall}\n").replace(
        "nice = 0\n", f"nice = {nice}\n"
    )


@pytest.fixture
def pinned() -> Iterator[list]:
    """(daemon, hogs): a daemon whose supervisors and engines all run on CPU (through its
    zygote's affinity, which every fork inherits), and the hogs started on that CPU later."""
    made: list = []
    yield made
    for item in made:
        if isinstance(item, subprocess.Popen):
            item.kill()
            item.wait()
    for item in made:
        if isinstance(item, DaemonProcess):
            item.stop()
            remove_home(item.home)


def pinned_daemon(made: list, stall: float, nice: int = 19) -> DaemonProcess:
    daemon = DaemonProcess(make_home(config(stall, nice))).start()
    made.append(daemon)
    root = str(daemon.home.root)
    zygotes = [
        pid
        for pid, args in current().command_lines()
        if "agent_run.supervisor.zygote" in args and root in args
    ]
    assert zygotes, "the daemon's fork server is not running"
    for pid in zygotes:
        os.sched_setaffinity(pid, {CPU})
    return daemon


def start_hogs(made: list) -> None:
    for _ in range(HOGS):
        made.append(
            subprocess.Popen(
                [sys.executable, "-c", "while True: pass"],
                start_new_session=True,  # a scheduling group of their own, as a user's work
                preexec_fn=lambda: os.sched_setaffinity(0, {CPU}),
            )
        )


def threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def waited_to_run(pid: int) -> float:
    """Seconds the threads of process `pid` have spent runnable but not running."""
    total = 0
    for tid in threads(pid):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
        except (OSError, IndexError):
            continue
    return total / 1e9


def group_waited(pgid: int) -> float:
    """The same for every process of the engine's group (bubblewrap, its init, the engine)."""
    return sum(waited_to_run(pid) for pid in current().group_members(pgid))


def feed(pid: int) -> None:
    """Give process `pid` (each thread) and its session's scheduling group the default priority."""
    for tid in threads(pid):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 0)
        except OSError:
            pass
    try:
        Path(f"/proc/{pid}/autogroup").write_text("0")
    except OSError:
        pass


def feed_the_supervisor(daemon: DaemonProcess, agent_id: str) -> None:
    """Once it has taken its row, the supervisor gets the default priority back (it still
    shares the hogs' CPU): only its engine is starved, and the watchdog runs on time."""
    pid = wait_for(
        lambda: row(daemon, agent_id)["supervisor_pid"], timeout=120, what="the supervisor"
    )
    feed(pid)


def row(daemon: DaemonProcess, agent_id: str):
    return db_rows(daemon.home, "SELECT * FROM executions WHERE agent_id = ?", (agent_id,))[0]


def ended(daemon: DaemonProcess, agent_id: str) -> bool:
    return row(daemon, agent_id)["state"] in ("succeeded", "failed", "cancelled", "lost")


@ROOT_ONLY
def test_a_starved_engine_is_not_stalled_and_finishes_once_fed(pinned, workdir):
    """Stall window 4 s. The engine waits to run for 6 s (its start-up, starved) and is not
    stopped; once the hogs end and it gets its priority back, it answers. Before, the
    watchdog stopped it `stalled` 4 s into its start."""
    daemon = pinned_daemon(pinned, stall=4.0)
    start_hogs(pinned)
    agent = daemon.call("start", {"task": "answer: fed at last", "workdir": str(workdir)})
    feed_the_supervisor(daemon, agent["id"])
    engine = wait_for(
        lambda: row(daemon, agent["id"])["engine_pid"], timeout=120, what="the engine to start"
    )
    wait_for(
        lambda: group_waited(engine) > 6.0 or ended(daemon, agent["id"]),
        timeout=120,
        what="the engine to wait 6 s for a CPU",
    )
    assert not ended(daemon, agent["id"]), row(daemon, agent["id"])["failure_message"]
    for hog in pinned:
        if isinstance(hog, subprocess.Popen):
            hog.kill()
    for pid in current().group_members(engine):
        feed(pid)
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 50})["agent"]
    assert done["state"] == "succeeded", done["execution"]["failure_message"]
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "fed at last"


@ROOT_ONLY
def test_an_engine_starved_for_three_stall_windows_is_starved_not_stalled(pinned, workdir):
    """Stall window 1 s: an engine that waits 3 s for a CPU within one silence is ended, and
    the failure names starvation, with the seconds it waited."""
    daemon = pinned_daemon(pinned, stall=1.0)
    start_hogs(pinned)
    agent = daemon.call("start", {"task": "answer: never fed", "workdir": str(workdir)})
    feed_the_supervisor(daemon, agent["id"])
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 50})["agent"]
    if done["state"] == "running":  # the wait's bound passed on a very busy machine
        done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 50})["agent"]
    message = done["execution"]["failure_message"]
    assert (done["state"], done["failure_kind"]) == ("failed", "starved"), message
    assert "waiting for a CPU" in message
    assert "the machine gave it no CPU" in done["execution"]["failure_advice"]


def test_a_silent_engine_beside_the_same_hogs_is_stalled(pinned, workdir):
    """The other half of the pair: an engine that sleeps (a provider that does not answer)
    while the hogs run is not waiting for a CPU, so its silence counts: `stalled`. (At nice 0,
    so that its start is not starved by the rest of a busy machine: only its silence is
    tested.)"""
    daemon = pinned_daemon(pinned, stall=2.0, nice=0)
    agent = daemon.call("start", {"task": "sleep: 300", "workdir": str(workdir)})
    wait_for(
        lambda: db_rows(
            daemon.home,
            "SELECT 1 FROM events WHERE agent_id = ? AND kind = 'session'",
            (agent["id"],),
        ),
        timeout=60,
        what="the engine's session (then it sleeps)",
    )
    start_hogs(pinned)
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 50})["agent"]
    if done["state"] == "running":
        done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 50})["agent"]
    assert (done["state"], done["failure_kind"]) == ("failed", "stalled"), done["execution"]
    assert done["execution"]["failure_message"].startswith("no engine event for 2s")


def test_the_clock_credits_a_groups_wait_for_the_cpu_where_the_platform_counts_it():
    """The watchdog's clock on its own: four busy processes of one group pinned to one CPU each
    want it all the time and wait for it three quarters of the time (more on a busy machine):
    most of a silence is credited on Linux. The psutil table cannot count it: nothing is
    credited (unknown is never evidence of starvation)."""
    from agent_run.supervisor.starvation import Silence
    from agent_run.system.processes.linux import LinuxProcesses
    from agent_run.system.processes.portable import PsutilProcesses

    leader = subprocess.Popen(
        [sys.executable, "-c", "import os; os.fork(); os.fork(); exec('while True: pass')"],
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {CPU}),
    )
    try:
        clocks = {
            table.name: Silence(1.0, table) for table in (LinuxProcesses(), PsutilProcesses())
        }
        began = time.monotonic()
        for clock in clocks.values():
            clock.event(began)
            clock.watch(leader.pid)

        def sampled() -> bool:
            now = time.monotonic()
            for clock in clocks.values():
                clock.sample(now)
            return now - began > 3.0

        wait_for(sampled, timeout=10, interval=0.05, what="3 s of samples")
        now = time.monotonic()
        assert clocks["linux"].starved > 0.5 * (now - began - clocks["linux"].after)
        assert clocks["linux"].active(now) < clocks["linux"].silent(now)
        assert clocks["psutil"].starved == 0.0
        assert clocks["psutil"].active(now) == clocks["psutil"].silent(now)
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
