"""Process identity on Linux: `/proc` (boot id, start ticks, state, process group, command
line, each thread's run-queue wait) and SO_PEERCRED. Nothing here guesses: what cannot be read
is unknown, never dead."""

import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

from agent_run.system.processes.base import (
    Liveness,
    PeerCredentials,
    ProcessIdentity,
    ThreadSched,
    no_such_group,
)

_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_SCHEDSTAT_PATH = Path("/proc/self/schedstat")  # absent: the kernel keeps no schedstats
_GONE = ("Z", "X")  # zombie, dead
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the `(comm)` field, or None if there is no such process."""
    # os.open/os.read rather than Path.read_text: a scan of the table reads every process's
    # stat, and the text layer made that 4x slower.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        raw = os.read(fd, 4096)  # one line of a few hundred bytes
    except ProcessLookupError:  # ended between the open and the read
        return None
    finally:
        os.close(fd)
    return raw[raw.rindex(b")") + 2 :].decode("ascii").split()


def _read(path: str) -> bytes:
    """A small /proc file's bytes; empty when it cannot be read (the thread ended)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""
    finally:
        os.close(fd)


class LinuxProcesses:
    name = "linux"
    start_tolerance = 0

    def boot_id(self) -> str:
        return _BOOT_ID_PATH.read_text().strip()

    def start_time(self, pid: int) -> int | None:
        """Clock ticks since boot at which the process started (field 22 of /proc/PID/stat)."""
        fields = stat_fields(pid)
        return int(fields[19]) if fields else None

    def liveness(self, identity: ProcessIdentity) -> Liveness:
        try:
            if self.boot_id() != identity.boot_id:
                return Liveness.DEAD
            fields = stat_fields(identity.pid)
        except OSError:
            return Liveness.UNKNOWN
        if fields is None or int(fields[19]) != identity.start_ticks or fields[0] in _GONE:
            return Liveness.DEAD
        return Liveness.ALIVE

    def group_members(self, pgid: int) -> list[int]:
        if no_such_group(pgid):
            return []
        members = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            fields = stat_fields(int(entry.name))
            if fields and int(fields[2]) == pgid and fields[0] not in _GONE:
                members.append(int(entry.name))
        return members

    def children(self, pid: int) -> list[int]:
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                fields = stat_fields(int(entry.name))
                if fields and int(fields[1]) == pid:
                    found.append(int(entry.name))
        return found

    def threads_sched(self, pids: list[int]) -> dict[int, ThreadSched] | None:
        """From each thread's `/proc/PID/task/TID/schedstat` (ns on a CPU, ns waiting on a run
        queue) and its state (`R`: runnable). None on a kernel without schedstats."""
        if not _SCHEDSTAT_PATH.exists():
            return None
        found: dict[int, ThreadSched] = {}
        for pid in pids:
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:  # ended
                continue
            for tid in threads:
                task = f"/proc/{pid}/task/{tid}"
                counts = _read(f"{task}/schedstat").split()
                state = _read(f"{task}/stat").rpartition(b")")[2].split()[:1]
                if len(counts) >= 2 and state:
                    found[int(tid)] = ThreadSched(int(counts[0]), int(counts[1]), state[0] == b"R")
        return found

    def adopt_orphans(self) -> bool:
        import ctypes  # only a supervisor asks, once

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
        except (OSError, AttributeError):
            return False

    def command_lines(self) -> Iterator[tuple[int, list[str]]]:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    raw = fh.read()
            except OSError:
                continue
            yield int(entry.name), [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]

    def peer_credentials(self, sock: socket.socket) -> PeerCredentials:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", raw)
        return PeerCredentials(pid=pid, uid=uid, gid=gid)
