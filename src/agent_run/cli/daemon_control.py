"""Daemon verbs beyond the tool table: `api stop` / `api restart` (agents keep running under
their supervisors) and `doctor` (the daemon's checks, with the CLI's local ones beside them)."""

import json
import os
import signal
import sys
import time
from typing import Any

import click

from agent_run.domain.errors import ConfigInvalid, DaemonUnavailable, DomainError
from agent_run.system.home import Home, write_stop_mark
from agent_run.system.processes import ProcessIdentity

STOP_TIMEOUT_SECONDS = 30.0


def stop_daemon(home: Home, by: str = "api stop") -> dict[str, Any] | None:
    """Mark the home stopped by `by` (autostart by the web UI or an MCP session then leaves it
    so), SIGTERM its daemon and wait until it has let go of the home; None if none was running.
    Its agents keep running: each has its own supervisor, in its own session."""
    from agent_run.rpc.autostart import lock_holder
    from agent_run.rpc.client import try_connect

    if home.root.is_dir():  # before the SIGTERM: a retry racing it finds the mark
        me = ProcessIdentity.current()
        write_stop_mark(home, me.pid, by, me.start_ticks)
    client = try_connect(home, timeout=10)
    if client is None:
        if (pid := lock_holder(home)) is not None:  # wedged, or still booting: no answer
            raise DaemonUnavailable(
                f"a daemon (pid {pid}) holds {home.lock_path} but does not answer on "
                f"{home.socket_path}: stop it with `kill {pid}` (then `kill -9 {pid}` if it "
                "stays); its agents keep running",
                pid=pid,
            )
        return None
    with client:
        live_agents: int | None
        try:
            status = client.call("status")
            pid, live_agents = status.pid, status.live_agents  # type: ignore[attr-defined]
        except DomainError:  # a daemon of an older version, without `status` (or its fields)
            pid, live_agents = client.call("ping").pid, None  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while lock_holder(home) is not None:
        if time.monotonic() > deadline:
            raise DaemonUnavailable(
                f"the daemon (pid {pid}) did not stop within "
                f"{STOP_TIMEOUT_SECONDS:.0f}s after SIGTERM: `kill -9 {pid}` ends it (its agents "
                "keep running)"
            )
        time.sleep(0.05)
    return {"stopped": True, "pid": pid, "live_agents": live_agents}


STAYS_STOPPED = (
    "it stays stopped (the web UI and MCP sessions do not start it) until `agent-run api "
    "restart`, `agent-run api serve` or another agent-run command"
)


def _stop_line(stopped: dict[str, Any]) -> str:
    count = "its" if stopped["live_agents"] is None else f"{stopped['live_agents']}"
    return (
        f"stopped the daemon (pid {stopped['pid']}); {count} live agent(s) keep running under "
        "their own supervisors"
    )


def _echo(session: Any, data: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(data) if session.output == "json" else text)


@click.command("stop")
@click.pass_context
def api_stop(ctx: click.Context) -> None:
    """Stop the daemon gracefully: running agents keep running under their supervisors. It
    stays stopped for the web UI and MCP sessions until `api restart`, `api serve` or another
    CLI verb starts it."""
    session = ctx.obj
    stopped = stop_daemon(session.home)
    if stopped is None:
        line = f"no daemon was running; {STAYS_STOPPED}"
        _echo(session, {"stopped": False, "message": line}, line)
        return
    line = f"{_stop_line(stopped)}; {STAYS_STOPPED}"
    _echo(session, {**stopped, "message": line}, line)


@click.command("restart")
@click.pass_context
def api_restart(ctx: click.Context) -> None:
    """Stop the daemon and start a new one from this shell (its PATH and environment); agents
    keep running. config.toml is checked first: an invalid one leaves the running daemon
    serving. A daemon run by systemd or launchd: restart it there instead
    (`systemctl --user restart UNIT`, `launchctl kickstart -k gui/UID/LABEL`)."""
    from agent_run.rpc.autostart import await_ready, start_daemon_detached

    session = ctx.obj
    home = session.home
    _check_config_for_restart(home)
    stopped = stop_daemon(home, by="api restart")
    # The user's own daemon (not --autostarted): it clears the stop mark once it holds the lock,
    # so no web UI or MCP session starts another one meanwhile.
    proc = start_daemon_detached(home, autostarted=False)
    try:
        client = await_ready(home, proc, None)
    except DomainError as exc:
        was = f"stopped the daemon (pid {stopped['pid']})" if stopped else "found no daemon"
        exc.message = (
            f"api restart {was} but could not start a new one: {exc.message}; the home stays "
            "stopped (the web UI and MCP sessions do not start one) until `agent-run api "
            "restart` succeeds"
        )
        raise
    with client:
        status = client.call("status")
    line = (
        _stop_line(stopped) + "; " if stopped else "no daemon was running; "
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


def _check_config_for_restart(home: Home) -> None:
    """config.toml as the new daemon would read it, before the running one is stopped: an
    invalid file is refused in `api restart`'s words, the daemon left serving."""
    from agent_run.config.model import load_config
    from agent_run.rpc.client import try_connect

    try:
        load_config(home)
    except ConfigInvalid as invalid:
        client = try_connect(home, timeout=10)
        if client is not None:
            with client:
                pid = (client.pong or {}).get("pid", "unknown")
            kept = f"the running daemon (pid {pid}) keeps serving with its last good config"
        else:
            kept = "no daemon was running and none was started"
        where = f"Fix `{invalid.field}`" if invalid.field else "Fix it"
        raise ConfigInvalid(
            f"api restart refused: {invalid.message}; {kept}. {where}, then run `agent-run api "
            "restart` again",
            field=invalid.field,
        ) from None


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
    checks.append(_sockets_check(home))
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


def _sockets_check(home: Home) -> dict[str, Any]:
    """Whether the sockets every agent needs (api.sock, wake.sock, its worker.sock) can be
    bound and connected in this home (`unix_sockets.check_home`)."""
    from agent_run.system.unix_sockets import check_home

    try:
        return _check("sockets", "ok", check_home(home))
    except DomainError as exc:
        return _check("sockets", "bad", exc.message, "use another home: --home or AGENT_RUN_HOME")


def daemon_checks(session: Any) -> tuple[int | None, list[dict[str, Any]]]:
    """(daemon pid, its checks); when no daemon can answer (an invalid config.toml: none is
    started), why, and the config as this CLI reads it."""
    from agent_run.config.model import load_config

    try:
        report = session.client.call("doctor")
    except DomainError as exc:
        from agent_run.rpc.autostart import DaemonStopped

        fix = "agent-run api restart" if isinstance(exc, DaemonStopped) else None
        checks = [_check("daemon", "bad", f"{exc.code}: {exc.message}", fix)]
        try:
            config = load_config(session.home)
            checks.append(
                _check("config", "ok", f"runtimes {', '.join(config.runtimes)} (read by this CLI)")
            )
            checks += _auth_checks_here(session.home, config)
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
    pong = session.client.call("ping")
    own = _check("daemon", "ok", f"pid {pong.pid} answers (version {pong.version})")
    checks = [{**c.model_dump(mode="json"), "ok": c.level != "bad"} for c in report.checks]
    return report.pid, [own, *checks]


def _auth_checks_here(home: Home, config: Any) -> list[dict[str, Any]]:
    """With no daemon to ask, each enabled runtime's auth and sign-in as this CLI sees them (its
    environment, not the daemon's), so doctor still says which sign-in is missing."""
    from agent_run.services.doctor import auth_checks

    checks = []
    for name, runtime in config.runtimes.items():
        for c in auth_checks(home.root, name, runtime) if runtime.enabled else []:
            detail = f"{c.detail} (checked by this CLI: no daemon answered)"
            checks.append(_check(c.check, c.level, detail, c.fix))
    return checks


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
    session.restart_stopped = False  # a stopped daemon is reported, not started
    local = local_checks(session.home)  # first: starting a daemon tightens the home
    pid, remote = daemon_checks(session)
    checks = [{**c, "where": "daemon"} for c in remote] + [{**c, "where": "local"} for c in local]
    ok = all(check["ok"] for check in checks)
    if session.output == "json":
        click.echo(json.dumps({"ok": ok, "daemon_pid": pid, "checks": checks}))
    else:
        click.echo("\n".join(_text_line(check) for check in checks))
    sys.exit(0 if ok else 1)
