"""`agent-run api bridge`: this home's daemon socket relayed over stdin/stdout, for a daemon on
another machine that runs `ssh HOST agent-run api bridge` (docs/scaling.md).

The bridge says its version first and waits for a `{"connect": true}` line: a caller of another
version hangs up then, before the bridge has started or touched anything. Then it connects to
this home's daemon (starting one, detached, when none answers), says the daemon's version, pid
and home, and copies bytes both ways until either side ends. It parses nothing after that: the
lines are the daemon's JSON-RPC, answered by its socket as for any local client.
"""

import json
import os
import socket
import sys
import threading
from typing import Any

from agent_run import __version__
from agent_run.system.home import Home

BRIDGE_PROTOCOL = 1
CHUNK = 64 * 1024


def _say(message: dict[str, Any]) -> None:
    _write_all(1, (json.dumps(message, separators=(",", ":")) + "\n").encode())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_line(fd: int) -> bytes:
    """One line from stdin without buffering past it (the rest is for the relay)."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return bytes(line)


def _pump_in(sock: socket.socket, done: threading.Event) -> None:
    """stdin -> the daemon; at end of input the caller hung up: the bridge ends."""
    try:
        while chunk := os.read(0, CHUNK):
            sock.sendall(chunk)
    except OSError:
        pass
    done.set()


def _pump_out(sock: socket.socket, done: threading.Event) -> None:
    """The daemon -> stdout; the daemon closing its end ends the bridge."""
    try:
        while chunk := sock.recv(CHUNK):
            _write_all(1, chunk)
    except OSError:
        pass
    done.set()


def run_bridge(home: Home) -> int:
    from agent_run.domain.errors import DomainError
    from agent_run.rpc.autostart import connect

    _say({"agent_run_bridge": BRIDGE_PROTOCOL, "version": __version__})
    try:
        request = json.loads(_read_line(0) or b"{}")
    except ValueError:
        request = {}
    if not isinstance(request, dict) or request.get("connect") is not True:
        return 0  # the caller refused us (another version) or went away: nothing was done
    try:
        client = connect(home)
    except DomainError as exc:
        _say({"error": exc.to_data()})
        return 1
    pong = client.pong or {}
    _say(
        {
            "daemon": {
                "version": pong.get("version"),
                "pid": pong.get("pid"),
                "home": pong.get("home"),
            }
        }
    )
    done = threading.Event()
    for pump in (_pump_in, _pump_out):
        threading.Thread(target=pump, args=(client.sock, done), daemon=True).start()
    done.wait()
    sys.stdout.flush()
    return 0
