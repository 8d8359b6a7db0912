"""Spawning a detached supervisor and waiting until it has recorded its identity."""

import asyncio
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agent_run.domain.errors import SpawnFailed
from agent_run.engines.environment import PASSTHROUGH
from agent_run.supervisor.forkserver import ForkServer
from agent_run.supervisor.identity import ProcessIdentity
from agent_run.supervisor.storage import supervisor_log_says_busy
from agent_run.system.home import Home

READY_TIMEOUT_SECONDS = 30.0
# Past READY_TIMEOUT_SECONDS, a supervisor whose log says it waits for the database's write
# lock (to record its identity) is waited for up to this long: a locked store is no reason to
# fail it. Its ready pipe still ends at once if it dies meanwhile.
READY_PATIENCE_SECONDS = 1800.0


def supervisor_argv(home: Home, execution_id: str, ready_fd: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agent_run.supervisor",
        "--home",
        str(home.root),
        "--execution",
        execution_id,
        "--ready-fd",
        str(ready_fd),
    ]


def supervisor_environment() -> dict[str, str]:
    """The allowlist a supervisor starts with: never the daemon's whole environment (its keys)."""
    return {name: os.environ[name] for name in (*PASSTHROUGH, "PYTHONPATH") if name in os.environ}


@dataclass
class StartedSupervisor:
    """A supervisor process just started, and the pipe it reports ready on. `pid` is None for
    one the fork server forked: its pid comes with its ready line."""

    pid: int | None
    ready_fd: int
    log_path: os.PathLike[str]

    def identity(self, line: bytes) -> ProcessIdentity:
        """The identity in its ready line; SpawnFailed when it exited before writing one."""
        if not line:
            which = "forked supervisor" if self.pid is None else f"supervisor pid {self.pid}"
            raise SpawnFailed(f"{which} exited before it was ready; see {self.log_path}")
        ready = json.loads(line)
        return ProcessIdentity(ready["pid"], ready["start_ticks"], ready["boot_id"])


def start_supervisor(
    home: Home,
    execution_id: str,
    log_path: os.PathLike[str],
    payload: bytes | None = None,
    fork_server: ForkServer | None = None,
) -> StartedSupervisor:
    """Start `python -m agent_run.supervisor` in its own session; do not wait for it.

    With a `fork_server` it is forked from the pre-imported zygote when that works, else spawned.

    The caller waits for its ready line (`spawn_supervisor`, or the daemon's event loop) and
    closes `ready_fd`. Ready means it has installed its signal handlers and taken the execution
    (compare-and-set on `created`). A supervisor that is late is not killed: it may have taken
    the row just now; one that is later still loses the compare-and-set and exits.

    `payload` (the execution's credential, `secrets.secret_payload`) is written to its stdin,
    which is then closed: a secret never travels in the environment or argv.
    """
    if fork_server is not None:
        forked = _fork_supervisor(fork_server, execution_id, log_path, payload)
        if forked is not None:
            return forked
    read_fd, write_fd = os.pipe()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            supervisor_argv(home, execution_id, write_fd),
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL if payload is None else subprocess.PIPE,
            stdout=log,
            stderr=log,
            cwd="/",
            start_new_session=True,
            env=supervisor_environment(),
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
    return StartedSupervisor(proc.pid, read_fd, log_path)


def _fork_supervisor(
    fork_server: ForkServer,
    execution_id: str,
    log_path: os.PathLike[str],
    payload: bytes | None,
) -> StartedSupervisor | None:
    """The supervisor forked by the zygote, or None when the caller must spawn it instead.

    The zygote gets the read end of the stdin pipe, the write end of the ready pipe and the log;
    the payload is written here, so the credential never passes through the zygote.
    """
    read_fd, write_fd = os.pipe()
    stdin_read, stdin_write = os.pipe()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        forked = fork_server.fork(
            execution_id, supervisor_environment(), (stdin_read, write_fd, log)
        )
    finally:
        for fd in (stdin_read, write_fd, log):
            os.close(fd)
    if not forked:
        os.close(read_fd)
        os.close(stdin_write)
        return None
    try:
        if payload is not None:
            _write_all(stdin_write, payload)
    except BrokenPipeError:  # it died at once: the ready pipe's EOF says so
        pass
    finally:
        os.close(stdin_write)
    return StartedSupervisor(None, read_fd, log_path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def spawn_supervisor(
    home: Home, execution_id: str, log_path: os.PathLike[str], payload: bytes | None = None
) -> ProcessIdentity:
    """Start a supervisor and block until it is ready; its identity."""
    started = start_supervisor(home, execution_id, log_path, payload)
    try:
        line = _read_line(started.ready_fd, READY_TIMEOUT_SECONDS)
    finally:
        os.close(started.ready_fd)
    return started.identity(line)


async def await_ready(
    started: StartedSupervisor,
    timeout: float = READY_TIMEOUT_SECONDS,
    patience: float = READY_PATIENCE_SECONDS,
) -> ProcessIdentity:
    """Wait on the event loop (epoll, no thread held) for a started supervisor's ready line:
    `timeout`, or up to `patience` while its log says it waits for the database's lock."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()
    data = bytearray()

    def readable() -> None:
        chunk = os.read(started.ready_fd, 4096)
        data.extend(chunk)
        if (not chunk or data.endswith(b"\n")) and not done.done():
            done.set_result(bytes(data))

    loop.add_reader(started.ready_fd, readable)
    try:
        line = await _ready_line(done, started, timeout, patience)
    finally:
        loop.remove_reader(started.ready_fd)
        os.close(started.ready_fd)
    return started.identity(line)


async def _ready_line(
    done: "asyncio.Future[bytes]", started: StartedSupervisor, timeout: float, patience: float
) -> bytes:
    began = time.monotonic()
    while True:
        try:
            return await asyncio.wait_for(asyncio.shield(done), timeout)
        except TimeoutError:
            waited = time.monotonic() - began
            locked = supervisor_log_says_busy(Path(started.log_path))
            if locked is None or waited >= patience:
                raise SpawnFailed(
                    f"supervisor not ready after {waited:.0f}s"
                    + (f" (its log: {locked})" if locked else "")
                ) from None


def _send_payload(proc: subprocess.Popen[bytes], payload: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:  # it died at once: the ready pipe's EOF says so
        pass


def _read_line(fd: int, timeout: float) -> bytes:
    """One line from a pipe within `timeout`; b"" when the writer closed it first.

    poll(), not select(): a daemon holding more than 1,023 descriptors is normal.
    """
    deadline = time.monotonic() + timeout
    data = b""
    with selectors.PollSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not data.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SpawnFailed(f"supervisor not ready after {timeout:.0f}s")
            if selector.select(remaining):
                chunk = os.read(fd, 4096)
                if not chunk:
                    return data
                data += chunk
    return data


def spawn_canary(home: Home) -> dict[str, int | str]:
    """Spawn a real detached supervisor in canary mode; return what it reported of itself."""
    read_fd, write_fd = os.pipe()
    argv = [
        sys.executable,
        "-m",
        "agent_run.supervisor",
        "--home",
        str(home.root),
        "--canary",
        "--ready-fd",
        str(write_fd),
    ]
    try:
        proc = subprocess.Popen(
            argv,
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd="/",
            start_new_session=True,
            env=supervisor_environment(),
        )
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
