"""The local executor's probe against real processes: alive, dead, reused (the pid now has
another start stamp) and never death for what cannot be proved."""

import os
import subprocess

from agent_run.executors import Probe
from agent_run.executors.local import probe_identity
from agent_run.supervisor.identity import ProcessIdentity, boot_id


def row(identity: ProcessIdentity) -> dict[str, object]:
    return {
        "supervisor_pid": identity.pid,
        "supervisor_start_ticks": identity.start_ticks,
        "boot_id": identity.boot_id,
    }


def test_the_local_probe_tells_alive_dead_and_reused_apart() -> None:
    me = ProcessIdentity.current()
    assert probe_identity(row(me)) is Probe.ALIVE
    reused = ProcessIdentity(me.pid, me.start_ticks - 1, me.boot_id)  # same pid, another birth
    assert probe_identity(row(reused)) is Probe.REUSED and Probe.REUSED.proves_end
    child = subprocess.Popen(["true"])
    ended = ProcessIdentity.of(child.pid)
    child.wait()
    assert ended is not None and probe_identity(row(ended)) is Probe.DEAD
    rebooted = ProcessIdentity(me.pid, me.start_ticks, "another-boot")
    assert probe_identity(row(rebooted)) is Probe.DEAD
    assert not Probe.UNKNOWN.proves_end and not Probe.ALIVE.proves_end
    assert boot_id() == me.boot_id and os.getpid() == me.pid
