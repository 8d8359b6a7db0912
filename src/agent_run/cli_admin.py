"""Admin verbs: init, doctor, login, api (serve, launchd, systemd), the demo quick start, mcp and web."""

import json
import sys
from typing import Any

import click

from agent_run.cli_daemon import api_restart, api_stop, doctor_cmd
from agent_run.cli_login import login_cmd
from agent_run.domain.errors import DomainError
from agent_run.web import DEFAULT_PORT as WEB_PORT


def _session(ctx: click.Context) -> Any:
    return ctx.obj


@click.command("init")
@click.option("--force", is_flag=True, help="overwrite an existing config.toml")
@click.option("--detect", is_flag=True, help="enable a runtime for each engine CLI found on PATH")
@click.pass_context
def init_cmd(ctx: click.Context, force: bool, detect: bool) -> None:
    """Create the home (0700) and a commented config.toml with the demo runtime enabled."""
    from agent_run.config import init_config

    session = _session(ctx)
    path = init_config(session.home, force=force, detect=detect)
    result = {"home": str(session.home.root), "config": str(path)}
    click.echo(json.dumps(result) if session.output == "json" else f"wrote {path}")


@click.group("api")
def api_group() -> None:
    """The daemon: serve, stop, restart, status, or a service definition for your service manager."""


api_group.add_command(api_stop)
api_group.add_command(api_restart)


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
@click.option(
    "--port",
    default=WEB_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="port on 127.0.0.1 (0: any free port)",
)
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
        generated = group.commands.get(command.name or "")
        if isinstance(command, click.Group) and isinstance(generated, click.Group):
            for name, sub in generated.commands.items():  # tool verbs such as `api status`
                command.add_command(sub, name)
        group.add_command(command)
    for command in api_group.commands.values():
        if command.name in ("stop", "restart"):
            command.params.append(format_option())
