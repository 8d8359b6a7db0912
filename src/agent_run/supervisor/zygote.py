"""The supervisors' fork server: one process with the supervisor's stack imported, forking each
supervisor on the daemon's request instead of booting a fresh interpreter.

The daemon forks it from itself at boot where it can (`serve_forked`), or runs it as
`python -m agent_run.supervisor.zygote --home H --pad ...` (client: `forkserver.py`), with a
SOCK_SEQPACKET control socket on its stdin and the supervisor's allowlisted environment. It
imports the stack (no thread, no database connection, no event loop, no signal handler of its
own), says `{"ready": pid}` and then serves one
request per message: a JSON object (`execution`, `home`, `env`) with three descriptors attached
(SCM_RIGHTS: the supervisor's stdin pipe, its ready pipe, its log). For each it forks the
supervisor and answers `{"forked": true, "pid": N}`; it ignores SIGCHLD, so the kernel reaps
each supervisor as it ends (no zombie, whether the zygote is busy, stopped or gone), and a
supervisor outlives the zygote as any orphan does. The child becomes
`python -m agent_run.supervisor --home H --execution E --ready-fd 3` in place: its own session
and process group, the three descriptors as 0/1/2 and 3 and nothing else open, the requested
environment only, the zygote's signal dispositions and mask as a fresh interpreter has them,
random re-seeded, `/` as cwd, and that command line written over its own (reconciliation finds
a supervisor by it). The credential never passes through the zygote: the daemon writes it to
the stdin pipe itself. End of input (the daemon is gone) ends the zygote; the supervisors it
forked live on (init, or the nearest subreaper, adopts them).
"""

import atexit
import gc
import importlib
import json
import os
import random
import signal
import socket
import sys
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from agent_run.supervisor.quick_exit import run_then_exit

# The supervisor's imports (measured with -X importtime), each engine's module included: the
# supervisor imports only its own engine's, so the zygote takes all of the built-in ones.
PRELOAD = (
    "agent_run.supervisor.__main__",
    "agent_run.supervisor.run",
    "agent_run.supervisor.refuse",
    "agent_run.supervisor.secrets",
    "agent_run.engines.plan",
    "agent_run.engines.demo",
    "agent_run.engines.claude",
    "agent_run.engines.codex",
    "agent_run.engines.qwen",
    "agent_run.worker_tools.server",  # served in the supervisor, on its gate's connections
    "agent_run.system.git",  # the worker tools' create_commit
    "argparse",
)
READY_FD = 3
MAX_REQUEST_BYTES = 64 * 1024


def _dispositions() -> dict[int, Any]:
    """Every catchable signal's disposition now (at the zygote's start: a fresh interpreter's)."""
    found = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            found[sig] = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
    return found


def _set_cmdline(args: list[str], area: tuple[int, int] | None = None) -> bool:
    """Write `args` over this process's own command line (/proc/PID/cmdline), in the room the
    zygote's padded argv left (`area`: where it lives, as the zygote found it: a fork's is the
    same); False where that cannot be done (then it keeps the zygote's). Plain descriptor calls:
    each object a supervisor touches first after its fork is a page it copies."""
    try:
        start, end = area or _cmdline_area()
        data = b"\0".join(arg.encode() for arg in args) + b"\0"
        if len(data) > end - start:
            return False
        mem = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
        try:
            os.pwrite(mem, data.ljust(end - start, b"\0"), start)
        finally:
            os.close(mem)
        return True
    except (OSError, ValueError, IndexError):
        return False


class _Inherited(NamedTuple):
    """What the zygote found once, before serving, so that each supervisor resets only what
    differs (each object a forked child touches first is a page it copies): the dispositions
    the zygote changed from a fresh interpreter's, with the fresh ones to restore; whether its
    signal mask blocks anything; the environment it was started with (a request's is nearly
    always the same: then nothing is rewritten); where its command line lives."""

    signals: dict[int, Any]
    mask_blocks: bool
    environment: dict[str, str]
    cmdline_area: tuple[int, int] | None

    @classmethod
    def here(cls, fresh: dict[int, Any]) -> "_Inherited":
        changed = {
            sig: handler
            for sig, handler in fresh.items()
            if handler is not None and signal.getsignal(sig) is not handler
        }
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
        return cls(changed, bool(blocked), dict(os.environ), _cmdline_area_or_none())


def _become_supervisor(request: dict[str, Any], fds: list[int], inherited: _Inherited) -> int:
    """In the forked child: reset what a fresh `python -m agent_run.supervisor` would not have,
    then run its `main` (the caller ends the process as that command does: `quick_exit`)."""
    os.setsid()  # its own session and process group, as start_new_session gives
    if inherited.mask_blocks:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig, handler in inherited.signals.items():
        signal.signal(sig, handler)
    stdin_fd, ready_fd, log_fd = fds
    for source, target in ((stdin_fd, 0), (log_fd, 1), (log_fd, 2), (ready_fd, READY_FD)):
        os.dup2(source, target)
    os.closerange(READY_FD + 1, os.sysconf("SC_OPEN_MAX"))  # nothing of the daemon or zygote
    if request["env"] != inherited.environment:
        os.environ.clear()
        os.environ.update(request["env"])
    os.chdir("/")
    random.seed()  # not the zygote's sequence (the random module re-seeds after fork too)
    args = [
        "--home",
        request["home"],
        "--execution",
        request["execution"],
        "--ready-fd",
        str(READY_FD),
    ]
    _set_cmdline([sys.executable, "-m", "agent_run.supervisor", *args], inherited.cmdline_area)
    main_module = importlib.import_module("agent_run.supervisor.__main__")
    sys.argv = [main_module.__file__ or "agent_run.supervisor", *args]
    code: int = main_module.run_supervisor(request["home"], request["execution"], READY_FD)
    return code


def _fork_supervisor(control: socket.socket, fds: list[int]) -> int | None:
    """Fork the supervisor: None in it; its pid in the zygote, which closes its copies of the
    supervisor's descriptors. One fork, not the classic daemon's two: the second fork's only
    gains are a parent other than the zygote (the kernel reaps the child anyway: SIGCHLD is
    ignored here) and no session leadership (the supervisor calls `setsid` itself, as a spawned
    one is a session leader); it cost a copy of the zygote's page tables, an exit and a wait
    per agent (bench/README.md)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        control.close()  # the supervisor's copy only
        return None
    for fd in fds:
        os.close(fd)
    return pid


def serve(control: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """Answer fork requests until end of input; returns only in a forked supervisor."""
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, MAX_REQUEST_BYTES, 3)
        except ConnectionError:
            return None
        if not message:
            return None
        try:
            request = json.loads(message)
            if len(fds) != 3 or not isinstance(request, dict):
                raise ValueError("a request is a JSON object with three descriptors")
            pid = _fork_supervisor(control, fds)
        except (OSError, ValueError) as exc:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            control.send(json.dumps({"forked": False, "error": str(exc)}).encode())
            continue
        if pid is None:
            return request, fds
        control.send(json.dumps({"forked": True, "pid": pid}).encode())


def main() -> int:
    signals = _dispositions()
    return _serve_then_become(socket.socket(fileno=0), signals)


def _serve_then_become(control: socket.socket, signals: dict[int, Any]) -> int:
    """Import the stack, say ready, serve; returns only as a forked supervisor (or at the end)."""
    for name in PRELOAD:
        importlib.import_module(name)
    _warm()
    # What is imported now is shared by every supervisor forked from here: out of the garbage
    # collector's reach, so a supervisor's collections do not copy those pages (copy-on-write).
    gc.freeze()
    # Its supervisors are its children: the kernel reaps each as it ends (each restores the
    # disposition a fresh interpreter has: `signals`, taken before this).
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    inherited = _Inherited.here(signals)
    control.send(json.dumps({"ready": os.getpid()}).encode())
    print(f"zygote ready: pid {os.getpid()}", flush=True)  # zygote.log
    served = serve(control)
    if served is None:
        return 0
    request, fds = served
    # A supervisor now: it ends without the interpreter's teardown (quick_exit), as a plain one.
    run_then_exit(lambda: _become_supervisor(request, fds, inherited))


def _warm() -> None:
    """Do once here what every supervisor would do first after the fork: read the store's
    migrations (it checks the schema is the newest) and pick the platform's process table."""
    from agent_run.store.db import migrations
    from agent_run.system.processes import current

    migrations()
    current()


def supervisor_cmdline_bytes(home: str) -> int:
    """The room a supervisor's command line of this home takes (any execution id)."""
    args = ["-m", "agent_run.supervisor", "--home", home, "--execution", "x" * 40, "--ready-fd"]
    return sum(len(arg.encode()) + 1 for arg in [sys.executable, *args, str(READY_FD)])


def _memory_area(first: int) -> tuple[int, int]:
    """A [start, end) pair of /proc/self/stat fields, counted after the command name: 45 is
    the command line's (arg_start, arg_end), 47 the exec-time environment's."""
    raw = Path("/proc/self/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[first]), int(fields[first + 1])


def _cmdline_area() -> tuple[int, int]:
    """Where this process's command line lives in its memory (arg_start, arg_end)."""
    return _memory_area(45)


def _set_environ_area(environment: dict[str, str]) -> None:
    """Write `environment` (what fits, whole entries) over the exec-time one /proc/PID/environ
    shows, blanking the rest: a zygote forked from the daemon must not show the daemon's
    environment there (the plain one shows its allowlist). Safe once os.environ was replaced:
    libc's environ then points at copies, not at this area."""
    start, end = _memory_area(47)  # env_start, env_end
    data = b""
    for name, value in environment.items():
        entry = f"{name}={value}".encode() + b"\0"
        if len(data) + len(entry) > end - start:
            break
        data += entry
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        mem.write(data.ljust(end - start, b"\0"))


def _cmdline_area_or_none() -> tuple[int, int] | None:
    try:
        return _cmdline_area()
    except (OSError, ValueError, IndexError):
        return None


def cmdline_room() -> int:
    """The bytes `_set_cmdline` can write in this process (0 if unknown)."""
    area = _cmdline_area_or_none()
    return area[1] - area[0] if area else 0


def single_threaded() -> bool:
    """Only this thread exists in the process (native ones included): forking is safe."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def serve_forked(home: str, control_fd: int, log_fd: int, environment: dict[str, str]) -> NoReturn:
    """In a child the daemon forked while single-threaded, before its event loop, database or
    signal handlers: become the zygote `main` would be, without importing what the daemon has.
    Nothing of the daemon survives but its memory: descriptors closed, atexit handlers dropped,
    and the supervisor it may become ends with `os._exit` (`quick_exit`: never with the daemon's
    finalizers, whose file objects name descriptors the supervisor reuses). Its command line
    reads as the plain zygote's, with `--forked`."""

    def become() -> int:
        os.setsid()  # as start_new_session gives the plain zygote
        _set_cmdline(
            [sys.executable, "-m", "agent_run.supervisor.zygote", "--home", home, "--forked"]
        )
        atexit._clear()
        for source, target in ((control_fd, 0), (log_fd, 1), (log_fd, 2)):
            os.dup2(source, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir("/")
        os.environ.clear()
        os.environ.update(environment)
        _set_environ_area(environment)
        return _serve_then_become(socket.socket(fileno=0), _dispositions())

    run_then_exit(become)


if __name__ == "__main__":
    sys.exit(main())
