"""Structured JSON-line logs (structlog) under the home's logs/, bounded in size while the daemon
runs: daemon.log is rotated by its writer as it passes `max_bytes` (daemon.log.1 ... .KEEP), and
the files other processes append to (daemon.out, zygote.log) are copied aside and truncated
(`bound_appended`)."""

import os
import shutil
import threading
from pathlib import Path
from typing import Any

import structlog

ROTATE_BYTES = 10 * 1024 * 1024
KEEP_ROTATED = 3


def shift_rotated(path: Path, keep: int) -> None:
    """Make room for a new `path.1`: `.N` becomes `.N+1`, the oldest past `keep` is dropped."""
    path.with_name(f"{path.name}.{keep}").unlink(missing_ok=True)
    for n in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{n + 1}"))


class RotatingLog:
    """A log file written by this process only, whose writes never raise (a full disk loses
    log lines, never a request), renamed to `.1` once it passes `max_bytes` and reopened."""

    def __init__(self, path: Path, max_bytes: int = ROTATE_BYTES, keep: int = KEEP_ROTATED) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        self._lock = threading.Lock()  # the event loop and the pool threads all log
        self.fd = -1
        self.size = 0
        self._open()
        if self.size > max_bytes:
            self._rotate()

    def _open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self.fd).st_size

    def _rotate(self) -> None:
        try:
            shift_rotated(self.path, self.keep)
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        except OSError:
            return  # keep writing where we are; the next write tries again
        os.close(self.fd)
        self._open()

    def write(self, text: str) -> None:
        data = text.encode()
        with self._lock:
            try:
                os.write(self.fd, data)
            except OSError:
                return
            self.size += len(data)
            if self.size > self.max_bytes:
                self._rotate()

    def flush(self) -> None:
        pass


def bound_appended(path: Path, max_bytes: int, keep: int) -> bool:
    """Keep a file that other processes append to (O_APPEND: the autostarted daemon's own
    stdout and stderr in daemon.out, the fork server's zygote.log) under `max_bytes`: copy it to
    `.1` and truncate it in place, so its writers carry on at the new end without reopening.
    (A line written between the copy and the truncation is lost.) Whether it was cut."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
        shift_rotated(path, keep)
        shutil.copyfile(path, path.with_name(f"{path.name}.1"))
        os.chmod(path.with_name(f"{path.name}.1"), 0o600)
        os.truncate(path, 0)
    except OSError:  # not there yet, or a full disk: try again next time
        return False
    return True


def json_logger(
    path: Path, max_bytes: int = ROTATE_BYTES, keep: int = KEEP_ROTATED, **context: Any
) -> structlog.typing.FilteringBoundLogger:
    logger = structlog.wrap_logger(
        structlog.WriteLogger(RotatingLog(path, max_bytes, keep)),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    )
    return logger.bind(**context)


def daemon_logger(
    home: "Any", max_bytes: int = ROTATE_BYTES, keep: int = KEEP_ROTATED
) -> structlog.typing.FilteringBoundLogger:
    return json_logger(home.logs_dir / "daemon.log", max_bytes, keep, component="daemon")
