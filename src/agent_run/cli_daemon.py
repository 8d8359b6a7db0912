"""Daemon verbs beyond the tool table: `api stop` / `api restart` (agents keep running under
their supervisors) and `doctor` (the daemon's checks, with the CLI's local ones beside them)."""

import fcntl
import json
import os
import signal
import sys
import time
from typing import Any

import click

from agent_run.domain.errors import DaemonUnavailable, DomainError
from agent_run.home import Home

STOP_TIMEOUT_SECONDS = 30.0


def _lock_free(home: Home) -> bool:
    """Whether no daemon holds the home's lock (it is released when the daemon process ends)."""
    try:
        fd = os.open(home.lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def stop_daemon(home: Home) -> dict[str, Any] | None:
    """SIGTERM the home's daemon and wait until it has let go of the home; None if none answered.
    Its agents keep running: each has its own supervisor, in its own session."""
    from agent_run.rpc.client import try_connect

    client = try_connect(home, timeout=10)
    if client is None:
        return None
    with client:
        status = client.call("status")
    os.kill(status.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while not _lock_free(home):
        if time.monotonic() > deadline:
            raise DaemonUnavailable(f"the daemon (pid {status.pid}) did not stop within "
                                    f"{STOP_TIMEOUT_SECONDS:.0f}s after SIGTERM")
        time.sleep(0.05)
    return {"stopped": True, "pid": status.pid, "live_agents": status.live_agents}


def _stop_line(stopped: dict[str, Any]) -> str:
    return (f"stopped the daemon (pid {stopped['pid']}); {stopped['live_agents']} live agent(s) keep "
            "running under their own supervisors")


def _echo(session: Any, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data) if session.output == "json" else text)


@click.command("stop")
@click.pass_context
def api_stop(ctx: click.Context) -> None:
    """Stop the daemon gracefully: running agents keep running under their supervisors."""
    session = ctx.obj
    stopped = stop_daemon(session.home)
    if stopped is None:
        _echo(session, {"stopped": False, "message": "no daemon was running"}, "no daemon was running")
        return
    _echo(session, {**stopped, "message": _stop_line(stopped)}, _stop_line(stopped))


@click.command("restart")
@click.pass_context
def api_restart(ctx: click.Context) -> None:
    """Stop the daemon and start a new one from this shell (its PATH and environment); agents keep running."""
    from agent_run.rpc.client import connect

    session = ctx.obj
    stopped = stop_daemon(session.home)
    with connect(session.home) as client:
        status = client.call("status")
    line = (_stop_line(stopped) + "; " if stopped else "") + f"daemon pid {status.pid} serves {status.home}"
    _echo(session, {"stopped": stopped, "pid": status.pid, "config_revision": status.config_revision,
                    "message": line}, line)


def local_checks(home: Home) -> list[dict[str, Any]]:
    """What only the CLI's side can check: the home's folder and a real supervisor spawn."""
    from agent_run.supervisor.launch import spawn_canary

    checks = []
    if not home.root.exists():
        checks.append({"check": "home", "level": "ok", "detail": f"{home.root} does not exist yet"})
    else:
        mode = home.root.stat().st_mode & 0o777
        checks.append({"check": "home", "level": "ok" if mode == 0o700 else "bad",
                       "detail": f"{home.root} mode {mode:o}" + ("" if mode == 0o700 else " (want 700)"),
                       "fix": None if mode == 0o700 else f"chmod 700 {home.root}"})
    try:
        report = spawn_canary(home)
        own = report["sid"] == report["pid"]
        checks.append({"check": "supervisor spawn", "level": "ok" if own else "bad",
                       "detail": f"supervisor pid {report['pid']} ran in its own session" if own
                       else f"supervisor did not get its own session: {report}"})
    except Exception as exc:  # a doctor reports, it does not crash
        checks.append({"check": "supervisor spawn", "level": "bad", "detail": repr(exc)})
    return checks


def _text_line(where: str, check: dict[str, Any]) -> str:
    mark = {"ok": "ok  ", "warn": "WARN", "bad": "BAD "}[check["level"]]
    line = f"{mark} {where:<6} {check['check']:<22} {check['detail']}"
    if check.get("fix"):
        line += "\n" + "\n".join(f"{'':<12}| {fix}" for fix in check["fix"].splitlines())
    return line


@click.command("doctor")
@click.pass_context
def doctor_cmd(ctx: click.Context) -> None:
    """The daemon's checks (its PATH, environment, config, runtimes) and this CLI's local ones."""
    session = ctx.obj
    local = local_checks(session.home)
    try:
        daemon: Any = session.client.call_raw("doctor")
    except DomainError as exc:
        daemon = {"ok": False, "pid": None, "checks": [
            {"check": "daemon", "level": "bad", "detail": f"{exc.code}: {exc.message}", "fix": None}]}
    ok = daemon["ok"] and all(check["level"] != "bad" for check in local)
    if session.output == "json":
        click.echo(json.dumps({"ok": ok, "daemon": daemon, "local": local}))
    else:
        click.echo(f"daemon checks (pid {daemon['pid']}, with the daemon's PATH and environment):")
        click.echo("\n".join(_text_line("daemon", c) for c in daemon["checks"]))
        click.echo("local checks (this shell):")
        click.echo("\n".join(_text_line("local", c) for c in local))
    sys.exit(0 if ok else 1)
