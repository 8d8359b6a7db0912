"""The platform seam for process identity: boot id + pid + start time, liveness (unknown is
never dead), process groups, command lines and a unix socket's peer credentials.

`current()` is chosen by the operating system alone, so the daemon and every supervisor on one
machine always read identities the same way: `/proc` and SO_PEERCRED on Linux (`linux.py`),
psutil elsewhere (`portable.py`, macOS included)."""

import sys
from functools import cache

from agent_run.system.processes.base import (
    Liveness,
    PeerCredentials,
    ProcessIdentity,
    ProcessTable,
    ThreadSched,
    reap_group_zombies,
)

__all__ = [
    "Liveness",
    "PeerCredentials",
    "ProcessIdentity",
    "ProcessTable",
    "ThreadSched",
    "current",
    "reap_group_zombies",
]


@cache
def current() -> ProcessTable:
    if sys.platform.startswith("linux"):
        from agent_run.system.processes.linux import LinuxProcesses

        return LinuxProcesses()
    from agent_run.system.processes.portable import PsutilProcesses

    return PsutilProcesses()
