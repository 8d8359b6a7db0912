"""The worker tools as a sandboxed engine starts them: stdin and stdout copied to and from the
supervisor's worker socket. The engine's MCP config runs it as `python -I -S .../relay.py
SOCKET` (`WorkerGate.mcp`); `python -m agent_run.worker_tools.relay SOCKET` works too.

Every engine keeps one for its whole run, so it is as small as an interpreter gets: isolated,
without `site`, by path (no package import), and importing only built-in modules: `_socket`,
not `socket` (its enums), `_thread`, not `threading`. That is 1.5 MiB of PSS less than the same
copy loop through `socket` and `threading` under `-m` (bench/README.md). For the same reason
it connects with its own few lines, not through `agent_run.system.unix_sockets`.
"""

import _socket
import _thread
import os
import sys

CHUNK = 65536


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _pump_stdin(sock: _socket.socket) -> None:
    try:
        while chunk := os.read(0, CHUNK):
            sock.sendall(chunk)
        sock.shutdown(_socket.SHUT_WR)
    except OSError:
        pass  # the supervisor closed the connection: the other direction sees it end


def _connect(sock: _socket.socket, path: str) -> None:
    """`agent_run.system.unix_sockets.connect`, copied (this file imports no package): a path that
    fits in a socket address (107 bytes and a NUL) by itself; a longer one through its folder
    opened O_PATH, `/proc/self/fd/N/worker.sock` (the sandbox mounts a /proc of its own)."""
    if len(os.fsencode(path)) <= 107 or not hasattr(os, "O_PATH"):
        sock.connect(path)  # without O_PATH (macOS), `check_home` refused a home too long
        return
    folder, name = path.rsplit("/", 1)
    fd = os.open(folder or "/", os.O_PATH | os.O_DIRECTORY)
    try:
        sock.connect(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


def relay(path: str) -> int:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        _connect(sock, path)
    except OSError as exc:
        sys.stderr.write(f"worker-tools relay: cannot reach {path}: {exc.strerror}\n")
        return 1
    _thread.start_new_thread(_pump_stdin, (sock,))
    try:
        while chunk := sock.recv(CHUNK):
            _write_all(1, chunk)
    except OSError:  # the engine closed our stdout (it is ending) or the connection broke
        pass
    return 0


if __name__ == "__main__":
    sys.exit(relay(sys.argv[1]))
