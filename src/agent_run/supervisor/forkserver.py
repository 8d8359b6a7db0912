"""The daemon's handle on the supervisors' fork server (`zygote.py`): start it, ask it to fork a
supervisor, notice it died or went stale, and say when the caller must spawn one the plain way.

A daemon that can (single-threaded, with room in its command line) forks the zygote from itself
at boot, for the cost of a fork (`fork_zygote_here`). Otherwise the zygote starts as a fresh
interpreter with the daemon's first spawn (a daemon that starts no agent never runs one). That
spawn, and any made while the zygote imports, are plain ones: waiting for the zygote instead
would leave an admitted agent without a supervisor for the length of an import, and a daemon
killed meanwhile would take its zygote along, so the agent would wait for the next boot.

`fork` answers True only once the zygote confirmed the fork; every other outcome (disabled, not
ready yet, dead, hung, stale code) is False and the caller spawns `python -m agent_run.supervisor`
as before. A lost zygote is restarted at once (at most once per `RESTART_SECONDS`). One forked
just before the zygote died, unconfirmed, races the fallback for the execution's compare-and-set
on `created`: one of them runs it, the other exits, as with any second spawn.
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent_run.supervisor.package_watch import PackageWatch
from agent_run.system.home import Home

DISABLE_ENV = "AGENT_RUN_FORK_SERVER"  # "0", "off", "false" or "no": every spawn is a plain one
ANSWER_TIMEOUT_SECONDS = 10.0
RESTART_SECONDS = 1.0
# Room in the zygote's argv for each supervisor's own command line (`zygote._set_cmdline`).
ARGV_PAD = "-" * 160


def fork_server_enabled(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


class ForkedZygote:
    """A zygote forked from the daemon, behind the part of Popen's interface `ForkServer` uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1  # reaped elsewhere
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = -1
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


class ForkServer:
    """One zygote per daemon; thread-safe (the spawn threads share it)."""

    def __init__(
        self, home: Home, environment: dict[str, str], log_path: Path, log: Any = None
    ) -> None:
        self.home = home
        self.log = log  # the daemon's structlog logger, or None
        self.environment = environment  # the supervisor allowlist the zygote starts with
        self.log_path = log_path
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | ForkedZygote | None = None
        self.sock: socket.socket | None = None
        self.package = PackageWatch()  # what the installed package is now
        self.stamp: str | None = (
            None  # the package when this zygote was started (before its imports)
        )
        self.ready = False  # it said so
        self.started_at = 0.0
        self.forks = 0  # confirmed forks, for tests and status
        self.fallbacks = 0
        self.closed = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        with self.lock:
            self._start()

    def _start(self) -> None:
        stamp = self.package.current()  # before it imports: a change meanwhile is a new stamp
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            argv = [sys.executable, "-m", "agent_run.supervisor.zygote"]
            argv += ["--home", str(self.home.root), "--pad", ARGV_PAD]
            self.proc = subprocess.Popen(
                argv,
                stdin=theirs.fileno(),
                stdout=log,
                stderr=log,
                cwd="/",
                start_new_session=True,  # a terminal's ^C is not for it
                env=self.environment,
            )
        except OSError:
            ours.close()
            self.proc = None
            return
        finally:
            theirs.close()
            os.close(log)
        self.sock, self.stamp, self.ready = ours, stamp, False
        self.started_at = time.monotonic()
        self._note("fork_server.started", pid=self.proc.pid)

    def fork_zygote_here(self) -> bool:
        """Start the zygote as a fork of this process, not as a fresh interpreter: what it has
        imported the zygote need not import again. Only while this process is single-threaded
        (the daemon before its event loop, database and signal handlers) and its command line
        has room for a supervisor's (`zygote._set_cmdline`: reconciliation finds a supervisor
        without a recorded identity by it); False otherwise, and the zygote starts as a plain
        one with the first spawn, as before."""
        from agent_run.supervisor import zygote

        room_needed = zygote.supervisor_cmdline_bytes(str(self.home.root))
        if not zygote.single_threaded() or zygote.cmdline_room() < room_needed:
            return False
        with self.lock:
            stamp = self.package.current()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:
                zygote.serve_forked(str(self.home.root), theirs.fileno(), log, self.environment)
            theirs.close()
            os.close(log)
            if pid < 0:
                ours.close()
                return False
            self.proc = ForkedZygote(pid)
            self.sock, self.stamp, self.ready = ours, stamp, False
            self.started_at = time.monotonic()
            self._note("fork_server.started", pid=pid, forked_from=os.getpid())
            return True

    def fork(self, execution_id: str, env: dict[str, str], fds: tuple[int, int, int]) -> bool:
        """Ask for a supervisor of `execution_id` with (stdin, ready, log) descriptors; True once
        forked. The caller keeps and closes its own copies of the descriptors."""
        stamp = self.package.current()  # outside the lock: a scan only after a change
        with self.lock:
            if self.closed or not self._usable(stamp):
                self.fallbacks += 1
                return False
            assert self.sock is not None
            request = {"execution": execution_id, "home": str(self.home.root), "env": env}
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
                answer = self._receive(ANSWER_TIMEOUT_SECONDS)
            except (OSError, EOFError, ValueError):
                answer = None
            if answer is None:  # dead or hung: replace it; this spawn falls back
                self._note("fork_server.lost", pid=self.pid, execution_id=execution_id)
                self._lose()
                self._restart_if_due()
                self.fallbacks += 1
                return False
            if answer.get("forked"):
                self.forks += 1
                return True
            self.fallbacks += 1
            return False

    def _usable(self, stamp: str) -> bool:
        """Ready and running today's code; otherwise start or replace it (and say not now)."""
        if self.sock is None:
            self._restart_if_due()
            return False
        if not self.ready:
            try:
                ready = self._receive(0)
            except (OSError, EOFError, ValueError):  # it died while importing
                self._note("fork_server.lost", pid=self.pid, phase="importing")
                self._lose()
                self._restart_if_due()
                return False
            if ready is None:
                return False  # still importing: this spawn is a plain one
            self.ready = True
        if stamp != self.stamp:  # upgraded or edited: never fork old code
            self._note("fork_server.stale", pid=self.pid, stamp=stamp, was=self.stamp)
            self._lose()
            self._restart_if_due(force=True)
            return False
        return True

    def _receive(self, timeout: float) -> dict[str, object] | None:
        """The zygote's next message within `timeout`, None if none yet; EOFError once it is gone.
        poll(), not select(): a daemon holding over 1,023 descriptors is normal."""
        assert self.sock is not None
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        if not poller.poll(int(timeout * 1000)):
            return None
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the fork server is gone")
        answer = json.loads(data)
        return answer if isinstance(answer, dict) else None

    def _lose(self) -> None:
        """Drop the current zygote: end of input ends it; kill it should it be hung."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        proc, self.proc, self.stamp, self.ready = self.proc, None, None, False
        if proc is not None:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGKILL)
                except ProcessLookupError:
                    pass
            threading.Thread(target=proc.wait, daemon=True, name="reap-zygote").start()

    def _note(self, event: str, **fields: Any) -> None:
        if self.log is None:
            return
        if event == "fork_server.started":
            self.log.info(event, **fields)
        else:
            self.log.warning(event, **fields)

    def _restart_if_due(self, force: bool = False) -> None:
        if self.closed:
            return
        if force or time.monotonic() - self.started_at >= RESTART_SECONDS:
            self._start()

    def close(self) -> None:
        """The daemon stops: the zygote goes (its supervisors stay)."""
        with self.lock:
            self.closed = True
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            if self.proc is not None:
                threading.Thread(target=self.proc.wait, daemon=True, name="reap-zygote").start()
                self.proc = None
        self.package.close()
