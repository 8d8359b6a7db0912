"""The client side of the socket: a small synchronous JSON-RPC client, and daemon autostart."""

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from agent_run.domain.errors import DaemonUnavailable, error_from_data
from agent_run.home import Home
from agent_run.rpc import protocol as p

NO_AUTOSTART_ENV = "AGENT_RUN_NO_AUTOSTART"
AUTOSTART_TIMEOUT_SECONDS = 20.0
DAEMON_ALREADY_RUNNING_EXIT = 1  # `agent-run api serve` when another daemon holds the lock


class RpcError(Exception):
    """A JSON-RPC protocol error (not a domain error): code, message, data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.data = code, message, data


class RpcClient:
    def __init__(self, socket_path: os.PathLike[str] | str, timeout: float | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(socket_path))
        self.file = self.sock.makefile("rb")
        self._ids = itertools.count(1)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        request_id = next(self._ids)
        line = p.encode_request(request_id, method, params or {})  # LineTooLong before sending
        try:
            self.sock.sendall(line)
            line = self.file.readline()
        except ConnectionError as exc:  # the daemon died mid-call: typed, not a traceback
            raise DaemonUnavailable(f"the daemon connection broke before it answered: {exc}") from None
        if not line:
            raise DaemonUnavailable("the daemon closed the connection before answering")
        reply = json.loads(line)
        if "error" in reply:
            err = reply["error"]
            if isinstance(err.get("data"), dict) and "code" in err["data"]:
                raise error_from_data(err["data"])  # typed: domain, params, LineTooLong, InternalError
            raise RpcError(err["code"], err["message"], err.get("data"))
        return reply["result"]

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def __enter__(self) -> "RpcClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def try_connect(home: Home, timeout: float | None = None) -> RpcClient | None:
    try:
        client = RpcClient(home.socket_path, timeout)
        client.call("ping")
        return client
    except (FileNotFoundError, ConnectionRefusedError, DaemonUnavailable, OSError):
        return None


def start_daemon_detached(home: Home) -> subprocess.Popen[bytes]:
    """Launch `agent-run api serve` in its own session; its output goes to logs/daemon.out."""
    home.ensure()
    out = os.open(home.logs_dir / "daemon.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "agent_run", "--home", str(home.root), "api", "serve"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd="/",
                                start_new_session=True)
    finally:
        os.close(out)
    return proc


def connect(home: Home, *, autostart: bool = True, timeout: float | None = None) -> RpcClient:
    """A client of the home's daemon, starting one (and saying so on stderr) when none answers."""
    client = try_connect(home, timeout)
    if client is not None:
        return client
    if not autostart or os.environ.get(NO_AUTOSTART_ENV) == "1":
        raise DaemonUnavailable(
            f"no daemon answers at {home.socket_path}; start one with `agent-run api serve`"
            + (f" ({NO_AUTOSTART_ENV}=1 turned autostart off)" if os.environ.get(NO_AUTOSTART_ENV) == "1" else ""))
    proc = start_daemon_detached(home)
    print(f"agent-run: no daemon was answering for {home.root}; started one (pid {proc.pid})",
          file=sys.stderr)
    deadline = time.monotonic() + AUTOSTART_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        client = try_connect(home, timeout)
        if client is not None:
            return client
        # Exit 1 means another daemon won the lock: keep knocking. Anything else is a failure.
        if proc.poll() not in (None, DAEMON_ALREADY_RUNNING_EXIT):
            break
        time.sleep(0.05)
    raise DaemonUnavailable(f"started a daemon (pid {proc.pid}) but it did not answer"
                            + (f": {_last_line(home.logs_dir / 'daemon.out')}" if proc.poll() else
                               f" within {AUTOSTART_TIMEOUT_SECONDS:.0f}s"))


def _last_line(path: os.PathLike[str]) -> str:
    try:
        lines = open(path, errors="replace").read().strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""

