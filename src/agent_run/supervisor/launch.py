"""Spawning a detached supervisor and waiting until it has recorded its identity."""

import json
import os
import select
import subprocess
import sys
import threading
import time

from agent_run.domain.errors import SpawnFailed
from agent_run.engines.environment import PASSTHROUGH
from agent_run.home import Home
from agent_run.supervisor.identity import ProcessIdentity

READY_TIMEOUT_SECONDS = 30.0


def supervisor_argv(home: Home, execution_id: str, ready_fd: int) -> list[str]:
    return [sys.executable, "-m", "agent_run.supervisor", "--home", str(home.root),
            "--execution", execution_id, "--ready-fd", str(ready_fd)]


def supervisor_environment() -> dict[str, str]:
    """The allowlist a supervisor starts with: never the daemon's whole environment (its keys)."""
    return {name: os.environ[name] for name in (*PASSTHROUGH, "PYTHONPATH") if name in os.environ}


def spawn_supervisor(home: Home, execution_id: str, log_path: os.PathLike[str],
                     payload: bytes | None = None) -> ProcessIdentity:
    """Start `python -m agent_run.supervisor` in its own session; return once it is ready.

    `payload` (the execution's credential, `secrets.secret_payload`) is written to its stdin,
    which is then closed. Ready means it has recorded its identity in the database and
    installed its signal handlers.
    """
    read_fd, write_fd = os.pipe()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            supervisor_argv(home, execution_id, write_fd), pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL if payload is None else subprocess.PIPE, stdout=log, stderr=log,
            cwd="/", start_new_session=True, env=supervisor_environment(),
        )
    except OSError as exc:
        os.close(read_fd)
        raise SpawnFailed(f"cannot start supervisor: {exc}") from None
    finally:
        os.close(write_fd)
        os.close(log)
    if payload is not None:
        _send_payload(proc, payload)
    # Reap it when it ends so it never lingers as a zombie of a long-lived daemon.
    threading.Thread(target=proc.wait, daemon=True, name=f"reap-{proc.pid}").start()
    try:
        line = _read_line(read_fd, READY_TIMEOUT_SECONDS)
    finally:
        os.close(read_fd)
    if not line:
        raise SpawnFailed(f"supervisor pid {proc.pid} exited before it was ready; see {log_path}")
    ready = json.loads(line)
    return ProcessIdentity(ready["pid"], ready["start_ticks"], ready["boot_id"])


def _send_payload(proc: subprocess.Popen[bytes], payload: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:  # it died at once: the ready pipe's EOF says so
        pass


def _read_line(fd: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SpawnFailed(f"supervisor not ready after {timeout:.0f}s")
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                return data
            data += chunk
    return data


def spawn_canary(home: Home) -> dict[str, int | str]:
    """Spawn a real detached supervisor in canary mode; return what it reported of itself."""
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-m", "agent_run.supervisor", "--home", str(home.root), "--canary",
            "--ready-fd", str(write_fd)]
    try:
        proc = subprocess.Popen(argv, pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
                                start_new_session=True, env=supervisor_environment())
    finally:
        os.close(write_fd)
    try:
        line = _read_line(read_fd, READY_TIMEOUT_SECONDS)
    finally:
        os.close(read_fd)
        _, stderr = proc.communicate(timeout=READY_TIMEOUT_SECONDS)
    if not line:
        raise SpawnFailed(f"canary supervisor exited {proc.returncode}: {stderr.decode()[-300:]}")
    return {**json.loads(line), "child_pid": proc.pid}
