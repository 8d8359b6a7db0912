"""Process identity through psutil, for platforms without `/proc` (macOS): boot time as the
boot id, the creation time as the start stamp, psutil's status for zombies. Peer credentials
come from the kernel: SO_PEERCRED where it exists, else LOCAL_PEERCRED and LOCAL_PEERPID (BSD
and macOS). What cannot be read is unknown, never dead."""

import os
import socket
import struct
from collections.abc import Iterator

import psutil

from agent_run.system.processes.base import (
    Liveness,
    PeerCredentials,
    ProcessIdentity,
    ThreadSched,
    no_such_group,
)

BOOT_PREFIX = "boot-time:"
# psutil derives a creation time from the boot time, which the kernel may restate by a second
# (clock steps); within this many centiseconds two stamps are the same start.
START_TOLERANCE = 100
_SOL_LOCAL, _LOCAL_PEERCRED, _LOCAL_PEERPID = 0, 0x001, 0x002
_XUCRED = struct.Struct("=IIh2x16I")  # cr_version, cr_uid, cr_ngroups, cr_groups[16]
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def stamp(create_time: float) -> int:
    return round(create_time * 100)


def parse_xucred(raw: bytes) -> tuple[int, int]:
    """(uid, gid) from a `struct xucred` (LOCAL_PEERCRED); the gid is the first group's."""
    _version, uid, ngroups, *groups = _XUCRED.unpack(raw[: _XUCRED.size])
    return uid, groups[0] if ngroups > 0 else -1


class PsutilProcesses:
    name = "psutil"
    start_tolerance = START_TOLERANCE

    def boot_id(self) -> str:
        return f"{BOOT_PREFIX}{round(psutil.boot_time())}"

    def start_time(self, pid: int) -> int | None:
        try:
            return stamp(psutil.Process(pid).create_time())
        except psutil.NoSuchProcess:  # a zombie too: it has exited
            return None

    def _same_boot(self, recorded: str) -> bool | None:
        now = self.boot_id()
        if recorded == now:
            return True
        if not recorded.startswith(BOOT_PREFIX):
            return None  # an id this table did not make: no proof either way
        return (
            abs(int(recorded.removeprefix(BOOT_PREFIX)) - int(now.removeprefix(BOOT_PREFIX))) <= 2
        )

    def liveness(self, identity: ProcessIdentity) -> Liveness:
        try:
            same_boot = self._same_boot(identity.boot_id)
            if same_boot is None:
                return Liveness.UNKNOWN
            if not same_boot:
                return Liveness.DEAD
            process = psutil.Process(identity.pid)
            started = stamp(process.create_time())
            status = process.status()
        except psutil.NoSuchProcess:  # ZombieProcess included
            return Liveness.DEAD
        except (psutil.Error, OSError, ValueError):
            return Liveness.UNKNOWN
        if abs(started - identity.start_ticks) > START_TOLERANCE or status in _GONE:
            return Liveness.DEAD
        return Liveness.ALIVE

    def group_members(self, pgid: int) -> list[int]:
        if no_such_group(pgid):
            return []
        members = []
        for process in psutil.process_iter():
            try:
                if os.getpgid(process.pid) == pgid and process.status() not in _GONE:
                    members.append(process.pid)
            except (psutil.Error, OSError):
                continue
        return members

    def children(self, pid: int) -> list[int]:
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except (psutil.Error, OSError):
            return []

    def threads_sched(self, pids: list[int]) -> dict[int, ThreadSched] | None:
        return None  # psutil does not say how long a thread waited to run: unknown

    def adopt_orphans(self) -> bool:
        return False  # no portable child subreaper: init reaps, and the table is scanned

    def command_lines(self) -> Iterator[tuple[int, list[str]]]:
        for process in psutil.process_iter():
            try:
                yield process.pid, process.cmdline()
            except (psutil.Error, OSError):
                continue

    def peer_credentials(self, sock: socket.socket) -> PeerCredentials:
        if hasattr(socket, "SO_PEERCRED"):
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, gid = struct.unpack("3i", raw)
            return PeerCredentials(pid=pid, uid=uid, gid=gid)
        uid, gid = parse_xucred(sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED.size))
        try:
            pid: int | None = struct.unpack("i", sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, 4))[0]
        except OSError:
            pid = None
        return PeerCredentials(pid=pid, uid=uid, gid=gid)
