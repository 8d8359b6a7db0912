"""Starting the home's daemon for a front-end that finds none answering, and waiting until it
answers: on the daemon's own readiness (its lock held, its socket answering `ping`) for as long
as a daemon process lives, never on a short fixed timeout, and never a second daemon (the
home's flock decides which one serves; a client that lost the race waits on the winner).

Like `client.py`, importing this module imports neither pydantic nor asyncio.
"""

import fcntl
import os
import subprocess
import sys
import time
from typing import Any

from agent_run.domain.errors import DaemonUnavailable
from agent_run.rpc.client import Client, try_connect
from agent_run.system.home import Home, clear_stop_mark, read_stop_mark

NO_AUTOSTART_ENV = "AGENT_RUN_NO_AUTOSTART"
# How long a daemon process may live without answering before a client gives up on it. A quiet
# machine answers in about a second; one under load took 15-46 s; a wedged one never does.
READY_TIMEOUT_SECONDS = 300.0
READY_NOTE_SECONDS = 15.0  # a line on stderr this often while the wait goes on
PING_TIMEOUT_SECONDS = 30.0  # one readiness probe: a daemon that accepted but is slow to reply


class DaemonStopped(DaemonUnavailable):
    """The user stopped the daemon (`agent-run api stop`): a front-end that runs on its own (the
    web UI, an MCP session) or a question about the daemon (`api status`, `doctor`) does not
    start it again; `api serve`, `api restart` or a CLI verb does."""


def stopped_error(home: Home, mark: dict[str, Any]) -> DaemonStopped:
    """Worded by the verb that stopped it: `api stop`, or an `api restart` whose new daemon did
    not start (the mark it wrote before its stop stays)."""
    when = f" at {mark['at']}" if mark.get("at") else ""
    by = mark.get("by") or "api stop"
    why = (
        f", which could not start a new one (see {home.logs_dir / 'daemon.out'})"
        if by == "api restart"
        else ""
    )
    return DaemonStopped(
        f"daemon stopped by `agent-run {by}`{when}{why}; run `agent-run api restart` to start "
        f"it (home {home.root})",
        stopped_at=mark.get("at"),
    )


def lock_holder(home: Home) -> str | None:
    """The pid a daemon holding the home's lock wrote into it ("unknown" if unreadable), or None
    when no process holds it (the kernel drops the lock when its holder ends)."""
    try:
        fd = os.open(home.lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
    return None


def start_daemon_detached(home: Home, autostarted: bool = True) -> subprocess.Popen[bytes]:
    """Launch `agent-run api serve` in its own session, its output to logs/daemon.out.
    `autostarted`: started for a client, so it refuses to serve a home marked stopped; `api
    restart` starts the user's own daemon, which clears the mark once it holds the lock."""
    home.ensure()
    out = os.open(home.logs_dir / "daemon.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    argv = [sys.executable, "-m", "agent_run", "--home", str(home.root), "api", "serve"]
    try:
        proc = subprocess.Popen(
            [*argv, "--autostarted"] if autostarted else argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd="/",
            start_new_session=True,
        )
    finally:
        os.close(out)
    return proc


def connect(
    home: Home,
    *,
    autostart: bool = True,
    timeout: float | None = None,
    restart_stopped: bool = True,
) -> Client:
    """A client of the home's daemon, starting one (and saying so on stderr) when none answers
    and none is starting. A daemon the user stopped (`api stop`) is started again only with
    `restart_stopped` (the user's own command); otherwise that is `DaemonStopped`."""
    client = try_connect(home, timeout)
    if client is not None:
        return client
    mark = read_stop_mark(home)
    if mark is not None and not restart_stopped:
        if _restarting(mark):  # an `api restart` under way: its daemon, not a stopped home
            client = _await_restart(home, mark, timeout)
            if client is not None:
                return client
            mark = read_stop_mark(home)
        if mark is not None:
            raise stopped_error(home, mark)
    off = os.environ.get(NO_AUTOSTART_ENV) == "1"
    if not autostart or off:
        raise not_answering(home, off)
    check_config(home)
    if mark is not None:
        clear_stop_mark(home)  # the user's command undoes their `api stop`
    why = (
        "the daemon was stopped by `agent-run api stop`"
        if mark is not None
        else "no daemon was answering"
    )
    return await_ready(home, None, timeout, why)


def _restarting(mark: dict[str, Any]) -> bool:
    """The mark is an `api restart`'s and that CLI process is still alive (starting its new
    daemon, which clears the mark once it holds the lock)."""
    from agent_run.system.processes import Liveness, ProcessIdentity, current

    pid, ticks = mark.get("pid"), mark.get("start_ticks")
    if mark.get("by") != "api restart" or not isinstance(pid, int) or not isinstance(ticks, int):
        return False
    table = current()
    return table.liveness(ProcessIdentity(pid, ticks, table.boot_id())) is Liveness.ALIVE


def _await_restart(home: Home, mark: dict[str, Any], timeout: float | None) -> Client | None:
    """Wait for the new daemon of an `api restart` under way; None once that restart has ended
    without one answering (its mark, if still there, then says so)."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        client = try_connect(home, timeout, ping_timeout=PING_TIMEOUT_SECONDS)
        if client is not None:
            return client
        if not _restarting(mark) and lock_holder(home) is None:
            return None
        time.sleep(0.05)
    return None


def not_answering(home: Home, autostart_off: bool = False) -> DaemonUnavailable:
    """No daemon answers and this caller starts none: whether one is starting (it holds the
    lock), and what starts one."""
    holder = lock_holder(home)
    if holder is not None:
        return DaemonUnavailable(
            f"a daemon (pid {holder}) holds {home.root} but does not answer yet (starting, or "
            "busy); ask again in a moment",
            pid=holder,
        )
    return DaemonUnavailable(
        f"no daemon answers at {home.socket_path}; `agent-run api restart` (or any agent-run "
        "command) starts one"
        + (f" ({NO_AUTOSTART_ENV}=1 turned autostart off)" if autostart_off else "")
    )


def await_ready(
    home: Home, proc: subprocess.Popen[bytes] | None, timeout: float | None, why: str = ""
) -> Client:
    """Wait until the home's daemon answers. While a process holds the home's lock, or ours
    (`proc`) is still on its way to it, keep waiting (up to READY_TIMEOUT_SECONDS); when neither
    is so, start ours (`api serve --autostarted`) if none was given, else say why it ended."""
    started = time.monotonic()
    note_at = started + READY_NOTE_SECONDS
    while True:
        client = try_connect(home, timeout, ping_timeout=PING_TIMEOUT_SECONDS)
        if client is not None:
            return client
        holder = lock_holder(home)
        if holder is None and proc is None:
            proc = start_daemon_detached(home)
            print(
                f"agent-run: {why} for {home.root}; started one (pid {proc.pid})", file=sys.stderr
            )
        elif holder is None and proc is not None and proc.poll() is not None:
            raise _ended(home, proc)  # ours ended, and no other daemon holds the home
        waited = time.monotonic() - started
        if waited > READY_TIMEOUT_SECONDS:
            pid = holder or (proc.pid if proc is not None else "unknown")
            raise DaemonUnavailable(
                f"the daemon (pid {pid}) did not answer within {READY_TIMEOUT_SECONDS:.0f}s; it "
                f"is still running: see {home.logs_dir / 'daemon.out'}, or end it with "
                f"`kill {pid}`",
                pid=pid,
            )
        if time.monotonic() >= note_at:
            note_at += READY_NOTE_SECONDS
            pid = holder or (proc.pid if proc is not None else "unknown")
            print(
                f"agent-run: waiting for the daemon (pid {pid}) to answer: {waited:.0f}s so far "
                "(it is alive; a loaded machine starts it slowly)",
                file=sys.stderr,
            )
        time.sleep(0.05)


def _ended(home: Home, proc: subprocess.Popen[bytes]) -> Exception:
    """Why the daemon we started ended without serving: the home marked stopped meanwhile (an
    autostarted one refuses it), the config turned invalid (its `ConfigInvalid`, raised
    here), or its last line of output."""
    autostarted = "--autostarted" in proc.args  # type: ignore[operator]
    if autostarted and (mark := read_stop_mark(home)) is not None:
        return stopped_error(home, mark)
    check_config(home)
    last = _last_line(home.logs_dir / "daemon.out")
    return DaemonUnavailable(
        f"started a daemon (pid {proc.pid}) but it exited {proc.returncode} without serving"
        + (f": {last}" if last else "")
    )


def check_config(home: Home) -> None:
    """A config the daemon would refuse is the caller's `ConfigInvalid` (with its field), not a
    daemon that never answers: checked here, before anything is started or made in the home."""
    from agent_run.config.model import load_config

    load_config(home)


def _last_line(path: os.PathLike[str]) -> str:
    try:
        lines = open(path, errors="replace").read().strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
