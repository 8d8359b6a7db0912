"""A supervisor on a full disk: evidence lines in its log, and a small reserve file it frees
so its terminal row can still be written when nothing else can."""

import ctypes
import os
from pathlib import Path

RESERVE_BYTES = 256 * 1024
LOG_RESERVE_BYTES = 64 * 1024
FALLOC_FL_KEEP_SIZE = 0x01
RESERVE_NAME = ".storage-reserve"
STORAGE_FULL_MARK = "storage_full:"  # reconciliation looks for this in supervisor.log


def note(line: str) -> None:
    """One line on the supervisor's stdout (its supervisor.log); a full disk loses it silently."""
    try:
        os.write(1, (line.rstrip("\n") + "\n").encode())
    except OSError:
        pass


def reserve_log_space(fd: int = 1, size: int = LOG_RESERVE_BYTES) -> bool:
    """Allocate blocks past the end of the supervisor's log (its stdout) without growing it,
    so the lines that say the disk is full can still be written when it is."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        end = os.fstat(fd).st_size
        return libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(end), ctypes.c_long(size)) == 0
    except (OSError, AttributeError):
        return False


class StorageReserve:
    """Space set aside at start-up in the execution's folder, released only when the disk is
    full and the end of the execution must still be recorded."""

    def __init__(self, directory: Path, size: int = RESERVE_BYTES) -> None:
        self.path = directory / RESERVE_NAME
        self.size = size
        self.held = False

    def take(self) -> bool:
        """Allocate the reserve (real blocks, not a sparse file); False when there is no room."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, self.size)
            self.held = True
        except OSError:
            self.held = False
        finally:
            os.close(fd)
        if not self.held:
            self.path.unlink(missing_ok=True)
        return self.held

    def release(self) -> bool:
        """Free the reserve; True when there was one to free."""
        held, self.held = self.held, False
        self.path.unlink(missing_ok=True)
        return held


def supervisor_log_says_full(log_path: Path, tail_bytes: int = 16384) -> str | None:
    """The last storage_full line a supervisor left in its log, if any."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail_bytes))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = [
        line
        for line in tail.splitlines()
        if STORAGE_FULL_MARK in line
        or "database or disk is full" in line
        or "No space left on device" in line
    ]
    return lines[-1].strip()[:300] if lines else None


def filesystem_full(path: Path, threshold_bytes: int = 1024 * 1024) -> int | None:
    """Free bytes on the filesystem holding `path` when below `threshold_bytes`, else None."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    return free if free < threshold_bytes else None
