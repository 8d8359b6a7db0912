"""A supervisor on a full disk or a locked database: evidence lines in its log, and a small
reserve file it frees so its terminal row can still be written when nothing else can."""

import ctypes
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from agent_run.store.db import BusyBackoff, until_unlocked

T = TypeVar("T")

RESERVE_BYTES = 256 * 1024
LOG_RESERVE_BYTES = 64 * 1024
FALLOC_FL_KEEP_SIZE = 0x01
RESERVE_NAME = ".storage-reserve"
STORAGE_FULL_MARK = "storage_full:"  # reconciliation looks for this in supervisor.log
STORE_BUSY_MARK = "store_busy:"  # and this: the database was locked ...
STORE_RECOVERED_MARK = "store_recovered:"  # ... until this


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


# How programs say a disk is full: the errno's text and name (ENOSPC, EDQUOT), SQLite's words.
NO_SPACE_WORDS = (
    "No space left on device",
    "ENOSPC",
    "Disk quota exceeded",
    "EDQUOT",
    "database or disk is full",
)


def last_line_saying(text: str, marks: tuple[str, ...]) -> str | None:
    """The last line of `text` holding one of `marks`, if any (stripped, at most 300 chars)."""
    lines = [line for line in text.splitlines() if any(mark in line for mark in marks)]
    return lines[-1].strip()[:300] if lines else None


def says_storage_full(text: str) -> str | None:
    """The last line of `text` that says a disk was full, if any."""
    return last_line_saying(text, NO_SPACE_WORDS)


def _log_tail(log_path: Path, tail_bytes: int = 16384) -> str:
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail_bytes))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def supervisor_log_says_full(log_path: Path) -> str | None:
    """The last storage_full line a supervisor left in its log, if any."""
    return last_line_saying(_log_tail(log_path), (STORAGE_FULL_MARK, *NO_SPACE_WORDS))


def supervisor_log_says_busy(log_path: Path) -> str | None:
    """The `store_busy:` line of a supervisor whose log ends waiting for the database's lock
    (none after it says the wait ended), if any."""
    last = last_line_saying(_log_tail(log_path), (STORE_BUSY_MARK, STORE_RECOVERED_MARK))
    return last if last is not None and last.startswith(STORE_BUSY_MARK) else None


def filesystem_full(path: Path, threshold_bytes: int = 1024 * 1024) -> int | None:
    """Free bytes on the filesystem holding `path` when below `threshold_bytes`, else None."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    return free if free < threshold_bytes else None


def patiently(attempt: Callable[[], T], writing: str) -> T:
    """`store.db.until_unlocked(attempt)`, said in the log: a `store_busy:` line when the first
    try of `writing` finds the database locked, a `store_recovered:` line once it got through
    (reconciliation reads the last of them if the supervisor dies meanwhile)."""
    waited: list[BusyBackoff] = []

    def on_busy(exc: sqlite3.OperationalError, backoff: BusyBackoff) -> None:
        if not waited:
            waited.append(backoff)
            note(f"{STORE_BUSY_MARK} {writing} waits for the database's write lock: {exc}")

    result = until_unlocked(attempt, on_busy)
    if waited:
        note(f"{STORE_RECOVERED_MARK} {writing} written after {waited[0].attempts} locked tries")
    return result
