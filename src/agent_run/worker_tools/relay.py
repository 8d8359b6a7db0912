"""`python -m agent_run.worker_tools.relay SOCKET`: the worker-tools server as a sandboxed engine
starts it: stdin and stdout copied to and from the supervisor's worker socket, stdlib only.

The real server runs outside the sandbox (spawned by the supervisor's `WorkerGate` per
connection), holding the capability token and the database; the engine sees only this socket.
"""

import os
import socket
import sys
import threading

CHUNK = 65536


def _pump_stdin(sock: socket.socket) -> None:
    while chunk := os.read(0, CHUNK):
        sock.sendall(chunk)
    sock.shutdown(socket.SHUT_WR)


def relay(path: str) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sys.stderr.write(f"worker-tools relay: cannot reach {path}: {exc.strerror}\n")
        return 1
    threading.Thread(target=_pump_stdin, args=(sock,), daemon=True).start()
    while chunk := sock.recv(CHUNK):
        os.write(1, chunk)
    return 0


if __name__ == "__main__":
    sys.exit(relay(sys.argv[1]))
