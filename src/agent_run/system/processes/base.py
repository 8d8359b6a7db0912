"""What a process table must answer, whatever the platform: the interface and its values."""

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


def no_such_group(pgid: int) -> bool:
    """The kernel's word that no process, not even a zombie, is in group `pgid`: no table
    to scan for the common case of a group that has ended (signal 0 delivers nothing)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # not ours to signal (EPERM), or an invalid pgid: the table must look
        return False
    return False


def reap_group_zombies(pgid: int) -> None:
    """Reap the ended processes of group `pgid` that are this process's children (its own or,
    as a subreaper, adopted): zombies keep a group in the kernel's table after all its
    processes ended. Only once the group's leader has been waited for, or its status would be
    taken from whoever waits for it."""
    while True:
        try:
            pid, _status = os.waitpid(-pgid, os.WNOHANG)
        except OSError:  # ChildProcessError: no child of ours left in the group
            return
        if pid == 0:
            return


@dataclass(frozen=True)
class ProcessIdentity:
    """A process for life: pid reuse and a reboot give another identity. `start_ticks` is the
    platform's own start stamp (clock ticks since boot on Linux, centiseconds since the epoch
    with psutil); identities are only compared on the machine, and by the table, that made them."""

    pid: int
    start_ticks: int
    boot_id: str

    @classmethod
    def of(cls, pid: int, table: "ProcessTable | None" = None) -> "ProcessIdentity | None":
        """The identity of the live process `pid`, or None when there is none."""
        if table is None:
            from agent_run.system.processes import current

            table = current()
        ticks = table.start_time(pid)
        return None if ticks is None else cls(pid, ticks, table.boot_id())

    @classmethod
    def current(cls) -> "ProcessIdentity":
        identity = cls.of(os.getpid())
        assert identity is not None
        return identity


@dataclass(frozen=True)
class ThreadSched:
    """One thread as the scheduler counts it: nanoseconds it ran, nanoseconds it waited on a
    run queue (added when a wait ends: a thread waiting now shows it once it runs), and
    whether it is runnable now (running, or waiting to)."""

    ran_ns: int
    waited_ns: int
    runnable: bool


class Liveness(StrEnum):
    ALIVE = "alive"
    DEAD = "dead"  # proven: gone, zombie, pid reused, or a different boot
    UNKNOWN = "unknown"  # no proof either way; never treated as death


@dataclass(frozen=True)
class PeerCredentials:
    """Who is at the other end of a connected unix socket, as the kernel vouches for it."""

    pid: int | None  # None where the platform does not say
    uid: int
    gid: int


class ProcessTable(Protocol):
    name: str
    # Start stamps of one process may differ by this much between two reads (0: they never do).
    start_tolerance: int

    def boot_id(self) -> str: ...

    def start_time(self, pid: int) -> int | None:
        """The process's start stamp, or None when no such process exists."""
        ...

    def liveness(self, identity: ProcessIdentity) -> Liveness: ...

    def group_members(self, pgid: int) -> list[int]:
        """Pids of live (non-zombie) processes whose process group is `pgid`."""
        ...

    def children(self, pid: int) -> list[int]:
        """Pids of the processes whose parent is `pid` (zombies included: theirs to reap)."""
        ...

    def threads_sched(self, pids: list[int]) -> dict[int, ThreadSched] | None:
        """What the scheduler counts of each thread of these processes, keyed by thread id;
        processes that have ended are left out. None where the platform does not count it:
        unknown, never evidence of starvation."""
        ...

    def adopt_orphans(self) -> bool:
        """Make this process the parent of its descendants that lose theirs (a child
        subreaper), so their zombies are its to reap at once rather than init's, whenever
        init gets to them; False where the platform has no such thing."""
        ...

    def command_lines(self) -> Iterator[tuple[int, list[str]]]:
        """(pid, argv) of every process whose command line can be read."""
        ...

    def peer_credentials(self, sock: socket.socket) -> PeerCredentials: ...
