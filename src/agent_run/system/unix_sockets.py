"""Every Unix socket agent-run binds or connects to, whatever the length of its path: the
daemon's `api.sock` and `wake.sock` and each agent's `worker.sock`, on this machine or a host.

A socket's address (`sun_path`) holds 108 bytes on Linux, 104 on macOS; a home under a long
user or CI folder makes `agents/<agent>/<execution>/sandbox/worker.sock` longer than that. A
path that fits is the address, as ever. A longer one stays where it is (in its 0700 folder,
itself 0600, the daemon's peer-uid check as before) and bind, connect and sendto are given
`/proc/self/fd/<fd>/<name>` instead, where `fd` is the socket's folder opened O_PATH
(close-on-exec): the kernel follows that link to the folder and looks `<name>` up in it with
the caller's own permissions, during the call, so the descriptor is closed right after (a
supervisor's nudge sender, `store/wake.py`, holds its own). That address is about 30 bytes
whatever the home's path, and works inside the sandbox too (bubblewrap mounts a /proc of its
own). A path that fits keeps its old address: nothing changes for a home that worked, and
a connect costs no extra open (bench/bench_unix_sockets.py). Not an abstract socket: that has
no owner or mode, and a sandbox shares the network namespace, so any local process could
reach it.

Where /proc/self/fd is missing (macOS, BSD, a Linux without /proc) a path too long is
`SocketPathTooLong`, naming it and its length. `check_home` finds that (for the longest
socket path the home will hold) at `init`, `doctor` and `api serve`, never an agent mid-run.
`worker_tools/relay.py` keeps its own copy of `connect` (it runs without any package import).
"""

import errno
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from agent_run.domain.errors import InvalidRequest
from agent_run.domain.ids import new_agent_id, new_execution_id
from agent_run.system.home import WORKER_SOCKET, Home

PROC_FD = "/proc/self/fd"
# The longest path `sun_path` holds with its terminating NUL, where the path is the address.
MAX_PATH_BYTES = 103 if sys.platform == "darwin" or "bsd" in sys.platform else 107
SOCKET_MODE = 0o600


class SocketPathTooLong(InvalidRequest):
    """A socket path this system can only address by its path, and too long for that; the
    field is `home` (the only part of the path the user chose)."""

    def __init__(self, path: Path, what: str = "the Unix socket path") -> None:
        length = len(os.fsencode(path))
        super().__init__(
            f"{what} {path} is {length} bytes, over the {MAX_PATH_BYTES} a socket "
            f"address holds here (this system has no {PROC_FD} to bind through): choose a home "
            "with a shorter path (--home or AGENT_RUN_HOME)",
            field="home",
            path=str(path),
            bytes=length,
            limit=MAX_PATH_BYTES,
        )


@cache
def through_folders() -> bool:
    """Whether this process can address a socket through its folder: O_PATH (Linux) and a
    mounted /proc. Asked once per process (the answer is its mount namespace's)."""
    return hasattr(os, "O_PATH") and os.path.isdir(PROC_FD)


@contextmanager
def address(path: Path) -> Iterator[str | bytes]:
    """The address that reaches the socket file `path`, valid inside the `with` block: the
    path itself when a socket address holds it, else through its folder. Raises what opening
    the folder raises (FileNotFoundError: as a connect to the path would)."""
    raw = os.fsencode(path)
    if len(raw) <= MAX_PATH_BYTES:
        yield raw
        return
    if not through_folders():
        raise SocketPathTooLong(path)
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"{PROC_FD}/{folder}/{path.name}"
    finally:
        os.close(folder)


def bind(sock: socket.socket, path: Path, mode: int = SOCKET_MODE) -> None:
    """Bind `sock` at `path` (a stale file there is the caller's to remove) and make the file
    `mode` before the caller listens: nobody can connect to it sooner."""
    with address(path) as where:
        sock.bind(where)
    os.chmod(path, mode)


def connect(sock: socket.socket, path: Path) -> None:
    with address(path) as where:
        sock.connect(where)


async def connect_async(sock: socket.socket, path: Path) -> None:
    """`connect` for a non-blocking socket, on the running event loop."""
    import asyncio  # only the async clients pay for it

    with address(path) as where:
        await asyncio.get_running_loop().sock_connect(sock, where)


def check_home(home: Home) -> str:
    """Whether agents can run in `home` as far as sockets go: a stream socket bound (0600),
    connected and answered in it, at a path as long as the longest socket path the home will
    hold (an agent's `worker.sock`), so it is addressed as that one will be. Returns what was
    found, for `doctor`; raises `SocketPathTooLong`, or `InvalidRequest` naming the OSError of
    a folder that cannot hold a socket (both with the field `home`)."""
    longest = home.sandbox_dir(new_agent_id(), new_execution_id()) / WORKER_SOCKET
    length = len(os.fsencode(longest))
    name = f".socket-probe-{os.getpid()}-{os.urandom(4).hex()}-"
    probe = home.root / name.ljust(length - len(os.fsencode(home.root)) - 1, "x")
    by_folder = length > MAX_PATH_BYTES
    try:
        home.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if by_folder and not through_folders():
            raise SocketPathTooLong(longest, "an agent's worker socket, such as")
        _round_trip(probe)
    except OSError as exc:
        raise InvalidRequest(
            f"agents cannot run in {home.root}: a Unix socket there could not be bound and "
            f"connected ({exc})",
            field="home",
        ) from exc
    if by_folder:
        return (
            f"bound and connected in {home.root} through the folder's descriptor ({PROC_FD}): "
            f"its socket paths (up to {length} bytes) are longer than a socket address holds"
        )
    return (
        f"bound and connected in {home.root} by path: its longest socket path, {length} bytes, "
        f"fits in a socket address ({MAX_PATH_BYTES})"
    )


def _round_trip(probe: Path) -> None:
    """Bind `probe`, connect to it, send a byte back; the file is removed whatever happens."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        bind(listener, probe)
        listener.listen(1)
        mode = os.stat(probe).st_mode & 0o777
        if mode != SOCKET_MODE:
            raise PermissionError(errno.EPERM, f"socket mode {mode:o}, not 600", str(probe))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(10)
            connect(client, probe)
            served, _ = listener.accept()
            with served:
                served.sendall(b"!")
            if client.recv(1) != b"!":
                raise ConnectionError(f"a socket in {probe.parent} did not carry a byte")
    finally:
        listener.close()
        probe.unlink(missing_ok=True)
