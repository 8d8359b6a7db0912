"""Process identity (boot id + pid + start time) and proof of death; pid reuse is not life."""

import os
import signal
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    return _BOOT_ID_PATH.read_text().strip()


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the `(comm)` field, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(")") + 2:].split()


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_ticks: int
    boot_id: str

    @classmethod
    def of(cls, pid: int) -> "ProcessIdentity | None":
        ticks = start_ticks(pid)
        return None if ticks is None else cls(pid, ticks, boot_id())

    @classmethod
    def current(cls) -> "ProcessIdentity":
        identity = cls.of(os.getpid())
        assert identity is not None
        return identity


class Liveness(StrEnum):
    ALIVE = "alive"
    DEAD = "dead"  # proven: gone, zombie, pid reused, or a different boot
    UNKNOWN = "unknown"  # no proof either way; never treated as death


def liveness(identity: ProcessIdentity) -> Liveness:
    try:
        if boot_id() != identity.boot_id:
            return Liveness.DEAD
        fields = _stat_fields(identity.pid)
    except OSError:
        return Liveness.UNKNOWN
    if fields is None:
        return Liveness.DEAD
    if int(fields[19]) != identity.start_ticks:
        return Liveness.DEAD
    if fields[0] in ("Z", "X"):
        return Liveness.DEAD
    return Liveness.ALIVE


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


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
    members = group_members(pgid)
    if not members:
        return False
    if leader is None:
        return True
    # Members of a group we started were born at or after its leader.
    return any((start_ticks(pid) or 0) >= leader.start_ticks for pid in members)
