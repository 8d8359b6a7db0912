"""Structured JSON-line logs (structlog) under the home's logs/, rotated by size at open."""

import os
from pathlib import Path
from typing import Any

import structlog

ROTATE_BYTES = 10 * 1024 * 1024
KEEP_ROTATED = 3


class _DiskFullTolerantFile:
    """A log file whose writes never raise: a full disk loses log lines, never a request."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, text: str) -> None:
        try:
            os.write(self.fd, text.encode())
        except OSError:
            pass

    def flush(self) -> None:
        pass


def _open_rotated(path: Path) -> "_DiskFullTolerantFile":
    if path.exists() and path.stat().st_size > ROTATE_BYTES:
        for n in range(KEEP_ROTATED - 1, 0, -1):
            older = path.with_name(f"{path.name}.{n}")
            if older.exists():
                older.replace(path.with_name(f"{path.name}.{n + 1}"))
        path.replace(path.with_name(f"{path.name}.1"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return _DiskFullTolerantFile(fd)


def json_logger(path: Path, **context: Any) -> structlog.typing.FilteringBoundLogger:
    logger = structlog.wrap_logger(
        structlog.WriteLogger(_open_rotated(path)),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    )
    return logger.bind(**context)


def daemon_logger(home: "Any") -> structlog.typing.FilteringBoundLogger:
    return json_logger(home.logs_dir / "daemon.log", component="daemon")
