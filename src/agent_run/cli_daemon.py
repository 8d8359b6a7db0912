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
        pid = client.pong["pid"] if client.pong else client.call_raw("ping")["pid"]
        try:
            live_agents = client.call_raw("status")["live_agents"]
        except DomainError:  # a daemon of an older version, without `status`
            live_agents = None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while not _lock_free(home):
        if time.monotonic() > deadline:
            raise DaemonUnavailable(
                f"the daemon (pid {pid}) did not stop within "
                f"{STOP_TIMEOUT_SECONDS:.0f}s after SIGTERM"
            )
        time.sleep(0.05)
    return {"stopped": True, "pid": pid, "live_agents": live_agents}


def _stop_line(stopped: dict[str, Any]) -> str:
    count = "its" if stopped["live_agents"] is None else f"{stopped['live_agents']}"
    return f"stopped the daemon (pid {stopped['pid']}); {count} live agent(s) keep running under their own supervisors"


def _echo(session: Any, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data) if session.output == "json" else text)


@click.command("stop")
@click.pass_context
def api_stop(ctx: click.Context) -> None:
    """Stop the daemon gracefully: running agents keep running under their supervisors."""
    session = ctx.obj
    stopped = stop_daemon(session.home)
    if stopped is None:
        _echo(
            session, {"stopped": False, "message": "no daemon was running"}, "no daemon was running"
        )
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
    line = (
        _stop_line(stopped) + "; " if stopped else ""
    ) + f"daemon pid {status.pid} serves {status.home}"
    _echo(
        session,
        {
            "stopped": stopped,
            "pid": status.pid,
            "config_revision": status.config_revision,
            "message": line,
        },
        line,
    )


def _check(check: str, level: str, detail: str, fix: str | None = None) -> dict[str, Any]:
    return {"check": check, "ok": level != "bad", "level": level, "detail": detail, "fix": fix}


def local_checks(home: Home) -> list[dict[str, Any]]:
    """What only the CLI's side can check: the home's folder and a real supervisor spawn."""
    from agent_run.supervisor.launch import spawn_canary

    checks = []
    if not home.root.exists():
        checks.append(
            _check("home", "ok", f"{home.root} does not exist yet (created on first use)")
        )
    else:
        mode = home.root.stat().st_mode & 0o777
        checks.append(
            _check(
                "home",
                "ok" if mode == 0o700 else "bad",
                f"{home.root} mode {mode:o}" + ("" if mode == 0o700 else " (want 700)"),
                None if mode == 0o700 else f"chmod 700 {home.root}",
            )
        )
    try:
        report = spawn_canary(home)
        own = report["sid"] == report["pid"]
        checks.append(
            _check(
                "supervisor spawn",
                "ok" if own else "bad",
                f"supervisor pid {report['pid']} ran in its own session"
                if own
                else f"supervisor did not get its own session: {report}",
            )
        )
    except Exception as exc:  # a doctor reports, it does not crash
        checks.append(_check("supervisor spawn", "bad", repr(exc)))
    return checks


def daemon_checks(session: Any) -> tuple[int | None, list[dict[str, Any]]]:
    """(daemon pid, its checks); when no daemon can answer (an invalid config.toml: none is
    started), why, and the config as this CLI reads it."""
    from agent_run.config import load_config

    try:
        report = session.client.call_raw("doctor")
    except DomainError as exc:
        checks = [_check("daemon", "bad", f"{exc.code}: {exc.message}")]
        try:
            config = load_config(session.home)
            checks.append(
                _check("config", "ok", f"runtimes {', '.join(config.runtimes)} (read by this CLI)")
            )
        except DomainError as invalid:
            checks.append(
                _check(
                    "config",
                    "bad",
                    f"{invalid.code}: {invalid.message}",
                    f"fix `{invalid.field}` in {session.home.config_path}"
                    if invalid.field
                    else None,
                )
            )
        return None, checks
    pong = session.client.call_raw("ping")
    own = _check("daemon", "ok", f"pid {pong['pid']} answers (version {pong['version']})")
    return report["pid"], [own, *({**c, "ok": c["level"] != "bad"} for c in report["checks"])]


def _text_line(check: dict[str, Any]) -> str:
    mark = {"ok": "ok  ", "warn": "WARN", "bad": "BAD "}[check["level"]]
    line = f"{mark} {check['where']:<6} {check['check']:<22} {check['detail']}"
    if check.get("fix"):
        line += "\n" + "\n".join(f"{'':<12}| {fix}" for fix in check["fix"].splitlines())
    return line


# The `doctor` tool's doc (tools.py), word for word: the CLI verb shows the tool's help.
DOCTOR_HELP = (
    "Checks run in the daemon, with its PATH and environment: config (revision, refusal, "
    "permissions), each runtime's binary and --version, auth variables set (never values), "
    "native sign-in, base_url reachable, engine home writable; engine CLIs installed but "
    "not configured, with the block to enable them."
)


@click.command("doctor", help=DOCTOR_HELP)
@click.pass_context
def doctor_cmd(ctx: click.Context) -> None:
    session = ctx.obj
    local = local_checks(session.home)  # first: starting a daemon tightens the home
    pid, remote = daemon_checks(session)
    checks = [{**c, "where": "daemon"} for c in remote] + [{**c, "where": "local"} for c in local]
    ok = all(check["ok"] for check in checks)
    if session.output == "json":
        click.echo(json.dumps({"ok": ok, "daemon_pid": pid, "checks": checks}))
    else:
        click.echo("\n".join(_text_line(check) for check in checks))
    sys.exit(0 if ok else 1)
