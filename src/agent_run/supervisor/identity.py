"""Process identity (boot id + pid + start time) and proof of death, through the platform's
process table (`agent_run.system.processes`); pid reuse is not life, and unknown is never death."""

import os
import signal

from agent_run.system.processes import Liveness, ProcessIdentity, current, reap_group_zombies

__all__ = [
    "Liveness",
    "ProcessIdentity",
    "adopt_orphans",
    "boot_id",
    "engine_group_alive",
    "group_members",
    "kill_group",
    "liveness",
    "reap_group_zombies",
    "start_ticks",
]


def adopt_orphans() -> bool:
    """Become the subreaper of this process's descendants (see ProcessTable.adopt_orphans)."""
    return current().adopt_orphans()


def boot_id() -> str:
    return current().boot_id()


def start_ticks(pid: int) -> int | None:
    """The process's start stamp in the platform's units, or None if there is no such process."""
    return current().start_time(pid)


def liveness(identity: ProcessIdentity) -> Liveness:
    return current().liveness(identity)


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose process group is `pgid`."""
    return current().group_members(pgid)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a whole process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def engine_group_alive(pgid: int | None, leader: ProcessIdentity | None) -> bool:
    """Whether any process of the engine's group survives; a reused pgid is not ours."""
    if pgid is None:
        return False
    table = current()
    members = table.group_members(pgid)
    if not members:
        return False
    if leader is None:
        return True
    # Members of a group we started were born at or after its leader.
    earliest = leader.start_ticks - table.start_tolerance
    return any((table.start_time(pid) or 0) >= earliest for pid in members)
