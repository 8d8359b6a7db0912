"""Nudges that the store's revision moved: a writer in another process (a supervisor) sends an
empty datagram to the daemon's wake socket after each commit, so the daemon reads the revision
at once instead of at its next poll. Only a hint, never the bus: a nudge lost (no daemon, a
full buffer) costs one poll interval, and the datagram carries nothing. Both ends address the
socket through `unix_sockets` (a home of any length)."""

import socket
from contextlib import ExitStack
from pathlib import Path

from agent_run.system import unix_sockets


class Waker:
    """The sending end, made once per writer; `wake` never raises and never blocks. It holds
    its address (`unix_sockets.address`: the home's folder open, for a path too long to be
    one) for its life: a nudge follows every commit, so the folder is not opened for each."""

    def __init__(self, path: Path) -> None:
        self.sock: socket.socket | None = None
        self.folder = ExitStack()
        try:
            self.address = self.folder.enter_context(unix_sockets.address(path))
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.sock.setblocking(False)
        except (OSError, unix_sockets.SocketPathTooLong):  # no home: the daemon only polls
            self.close()

    def wake(self) -> None:
        if self.sock is None:
            return
        try:
            self.sock.sendto(b"!", self.address)
        except OSError:  # no daemon listening, its buffer full: it polls
            pass

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.folder.close()


def listen(path: Path) -> socket.socket | None:
    """The receiving end, for the daemon (which holds the home's lock: a file left at `path`
    is stale): a non-blocking datagram socket bound at `path` (0600); the caller registers it
    with its event loop and calls `drain` when it is readable. None if it cannot be bound."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        unix_sockets.bind(sock, path)
        sock.setblocking(False)
    except (OSError, unix_sockets.SocketPathTooLong):
        sock.close()
        return None
    return sock


def drain(sock: socket.socket) -> int:
    """Read every pending nudge; how many there were (their content is ignored)."""
    count = 0
    while True:
        try:
            sock.recv(16)
        except OSError:  # none left (BlockingIOError), or the socket failed: either way, done
            return count
        count += 1
