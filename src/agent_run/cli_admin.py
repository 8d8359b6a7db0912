"""Admin verbs: init, doctor, login, api (serve, launchd, systemd), the demo quick start, mcp and web."""

import json
import os
import shutil
import sys
from typing import Any

import click

from agent_run.cli_login import check_runtime_signin, login_cmd
from agent_run.domain.errors import DomainError
from agent_run.web import DEFAULT_PORT as WEB_PORT


def _session(ctx: click.Context) -> Any:
    return ctx.obj


@click.command("init")
@click.option("--force", is_flag=True, help="overwrite an existing config.toml")
@click.pass_context
def init_cmd(ctx: click.Context, force: bool) -> None:
    """Create the home (0700) and a commented config.toml with the demo runtime enabled."""
    from agent_run.config import init_config

    session = _session(ctx)
    path = init_config(session.home, force=force)
    session.emit("init", {"home": str(session.home.root), "config": str(path)})


def _check(name: str, fn: Any) -> dict[str, Any]:
    try:
        ok, detail = fn()
    except DomainError as exc:
        ok, detail = False, f"{exc.code}: {exc.message}"
    except Exception as exc:  # a doctor reports, it does not crash
        ok, detail = False, repr(exc)
    return {"check": name, "ok": ok, "detail": detail}


@click.command("doctor")
@click.pass_context
def doctor_cmd(ctx: click.Context) -> None:
    """Check the home, config, daemon, each runtime's binary and sign-in, and a real supervisor spawn."""
    from agent_run.config import load_config
    from agent_run.rpc.client import try_connect
    from agent_run.supervisor.launch import spawn_canary

    session = _session(ctx)
    home = session.home

    def check_home() -> tuple[bool, str]:
        if not home.root.exists():
            return True, f"{home.root} does not exist yet (created on first use)"
        mode = home.root.stat().st_mode & 0o777
        return mode == 0o700, f"{home.root} mode {mode:o}" + ("" if mode == 0o700 else " (want 700)")

    def check_config() -> tuple[bool, str]:
        config = load_config(home)
        source = home.config_path if home.config_path.exists() else "built-in defaults"
        return True, f"{source}: runtimes {', '.join(config.runtimes)}"

    def check_daemon() -> tuple[bool, str]:
        client = try_connect(home, timeout=5)
        if client is None:
            return True, "not running; the CLI starts one when needed"
        pong = client.call("ping")
        client.close()
        return True, f"pid {pong.pid} answers (version {pong.version})"

    def check_canary() -> tuple[bool, str]:
        report = spawn_canary(home)
        own_session = report["sid"] == report["pid"]
        return own_session, (f"supervisor pid {report['pid']} ran in its own session, "
                             f"start ticks {report['start_ticks']}" if own_session
                             else f"supervisor did not get its own session: {report}")

    checks = [_check("home", check_home), _check("config", check_config), _check("daemon", check_daemon)]
    try:
        config = load_config(home)
        for name, runtime in config.runtimes.items():
            checks.append(_check(f"runtime {name}", lambda r=runtime: _check_binary(r)))
            if runtime.auth is not None and runtime.auth.login is not None:
                checks.append(_check(f"sign-in {name}", lambda r=runtime, n=name: check_runtime_signin(r, n)))
    except DomainError:
        pass
    checks.append(_check("supervisor spawn", check_canary))
    ok = all(c["ok"] for c in checks)
    if session.output == "json":
        click.echo(json.dumps({"ok": ok, "checks": checks}))
    else:
        for c in checks:
            click.echo(f"{'ok ' if c['ok'] else 'BAD'}  {c['check']:<18} {c['detail']}")
    sys.exit(0 if ok else 1)


def _check_binary(runtime: Any) -> tuple[bool, str]:
    from agent_run.engines.registry import engine_spec

    if not runtime.enabled:
        return True, "disabled"
    default_binary = engine_spec(runtime.engine).default_binary
    if default_binary is None:  # the engine runs no CLI of its own (the demo)
        return True, f"built in (runs {sys.executable})"
    binary = runtime.binary or default_binary
    path = shutil.which(binary)
    if path is None:
        return False, f"{binary} not found on PATH"
    return os.access(path, os.X_OK), path


@click.group("api")
def api_group() -> None:
    """The daemon: serve it, or print a service definition for your service manager."""


@api_group.command("serve")
@click.pass_context
def api_serve(ctx: click.Context) -> None:
    """Run the daemon in the foreground (one per home)."""
    from agent_run.daemon import DaemonAlreadyRunning, serve_forever

    session = _session(ctx)
    try:
        serve_forever(session.home)
    except DaemonAlreadyRunning as exc:
        click.echo(f"agent-run: {exc}", err=True)
        sys.exit(1)
    except DomainError as exc:
        click.echo(f"agent-run: daemon not started: {exc.code}: {exc.message}", err=True)
        sys.exit(2)


@api_group.command("systemd")
@click.pass_context
def api_systemd(ctx: click.Context) -> None:
    """Print a systemd --user unit for the daemon."""
    from agent_run.service_files import systemd_unit

    click.echo(systemd_unit(_session(ctx).home), nl=False)


@api_group.command("launchd")
@click.pass_context
def api_launchd(ctx: click.Context) -> None:
    """Print a launchd agent plist for the daemon."""
    from agent_run.service_files import launchd_plist

    click.echo(launchd_plist(_session(ctx).home), nl=False)


@click.command("demo")
@click.option("--candidates", "count", default=3, show_default=True, type=click.IntRange(1, 10))
@click.pass_context
def demo_cmd(ctx: click.Context, count: int) -> None:
    """Quick start: a small ranked batch on the offline demo engine, shown live."""
    from agent_run.quickstart import run_quickstart

    sys.exit(run_quickstart(_session(ctx), count))


@click.command("mcp")
@click.pass_context
def mcp_cmd(ctx: click.Context) -> None:
    """Serve the tool table as an MCP stdio server (a proxy to the daemon)."""
    from agent_run.mcp_server import run

    run(_session(ctx).home)


@click.command("web")
@click.option("--port", default=WEB_PORT, show_default=True, type=click.IntRange(0, 65535),
              help="port on 127.0.0.1 (0: any free port)")
@click.option("--open", "open_browser", is_flag=True, help="open the URL in your browser")
@click.pass_context
def web_cmd(ctx: click.Context, port: int, open_browser: bool) -> None:
    """Serve the web UI on 127.0.0.1 (a front-end of the daemon); prints its URL with a token."""
    from agent_run.web.app import run

    run(_session(ctx).home, port, open_browser)


def register(group: click.Group, format_option: Any) -> None:
    for command in (init_cmd, doctor_cmd, login_cmd, api_group, demo_cmd, mcp_cmd, web_cmd):
        if not isinstance(command, click.Group) and command not in (mcp_cmd, web_cmd):
            command.params.append(format_option())
        group.add_command(command)
