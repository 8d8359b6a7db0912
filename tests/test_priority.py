"""Agents yield the CPU: an agent's supervisor and engine run at `[supervisor] nice` (5 by
default), and on Linux so do their sessions' scheduling groups (autogroup), each session being a
group of its own; `nice = 0` leaves them at the default priority."""

import os

import pytest

from tests.harness import TEST_CONFIG, DaemonProcess, db_rows, make_home, remove_home, wait_for

AUTOGROUP = os.path.exists("/proc/self/autogroup")


def niceness(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[16])


def group_nice(pid: int) -> int:
    with open(f"/proc/{pid}/autogroup") as fh:  # "/autogroup-N nice K"
        return int(fh.read().split()[-1])


def running_pids(daemon, workdir) -> tuple[str, int, int]:
    agent = daemon.call(
        "start", {"task": "steps: 200\nstep_seconds: 0.05\nanswer: x", "workdir": str(workdir)}
    )

    def pids():
        rows = db_rows(
            daemon.home,
            "SELECT supervisor_pid, engine_pid FROM executions WHERE agent_id = ? "
            "AND state = 'running'",
            (agent["id"],),
        )
        return (rows[0]["supervisor_pid"], rows[0]["engine_pid"]) if rows else None

    wait_for(lambda: pids() is not None, what="the agent running")
    supervisor, engine = pids()
    return agent["id"], supervisor, engine


@pytest.mark.parametrize("nice", [None, 0, 15])
def test_an_agents_supervisor_and_engine_run_at_the_configured_niceness(workdir, nice):
    # The suite's config runs agents at 0 (their waits stay short on a busy test machine);
    # None here is the product's default.
    assert "nice = 0\n" in TEST_CONFIG
    config = TEST_CONFIG.replace("nice = 0\n", "" if nice is None else f"nice = {nice}\n")
    home = make_home(config)
    daemon = DaemonProcess(home).start()
    expected = 5 if nice is None else nice
    try:
        agent_id, supervisor, engine = running_pids(daemon, workdir)
        assert niceness(supervisor) == expected
        assert niceness(engine) == expected  # inherited from the supervisor
        if AUTOGROUP:
            assert group_nice(supervisor) == expected
            assert group_nice(engine) == expected  # the engine's own session's group
        assert niceness(daemon.call("ping")["pid"]) == 0  # the daemon keeps its priority
        daemon.call("cancel", {"agent_id": agent_id})
        daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    finally:
        daemon.stop()
        remove_home(home)
