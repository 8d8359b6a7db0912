"""Admin verbs: init, doctor, login, api (serve, launchd, systemd), the demo quick start, mcp and web."""

import json
import sys
from typing import Any

import click

from agent_run.cli.daemon_control import api_restart, api_stop, doctor_cmd
from agent_run.cli.exits import epilog
from agent_run.cli.login import login_cmd
from agent_run.web import DEFAULT_PORT as WEB_PORT


def _session(ctx: click.Context) -> Any:
    return ctx.obj


@click.command("init")
@click.option("--force", is_flag=True, help="overwrite an existing config.toml")
@click.option(
    "--detect",
    is_flag=True,
    help="enable a runtime for each engine CLI found on PATH or in a common npm prefix; with "
    "a config.toml already there, append only the runtimes it lacks (the rest is kept as is)",
)
@click.pass_context
def init_cmd(ctx: click.Context, force: bool, detect: bool) -> None:
    """Create the home (0700) and a commented config.toml with the demo runtime enabled."""
    from agent_run.config.init_file import detect_into_config, init_config
    from agent_run.system.unix_sockets import check_home

    session = _session(ctx)
    home = session.home
    check_home(home.ensure())  # a home agents could not run in is refused now, not mid-agent
    if detect and not force and home.config_path.exists():
        added = detect_into_config(home)
        result = {"home": str(home.root), "config": str(home.config_path), "added": added}
        line = (
            f"added runtime(s) {', '.join(added)} to {home.config_path} (enabled; the rest of "
            "the file is as it was)"
            if added
            else f"{home.config_path}: nothing to add (every engine CLI found on PATH or in a "
            "common npm prefix has a runtime)"
        )
        click.echo(json.dumps(result) if session.output == "json" else line)
        return
    path, enabled, commented = init_config(home, force=force, detect=detect)
    result = {"home": str(home.root), "config": str(path), "enabled": sorted(enabled)}
    click.echo(json.dumps(result) if session.output == "json" else _wrote(path, enabled, commented))


def _wrote(path: Any, enabled: dict[str, str | None], commented: dict[str, str]) -> str:
    """What `init` wrote, in words: the runtimes it enabled and the engines it found but left
    commented out (`--detect` enables those)."""
    shown = [f"{name} ({binary})" if binary else name for name, binary in sorted(enabled.items())]
    lines = [f"wrote {path}", f"enabled runtime(s): {', '.join(shown) or 'none'}"]
    if commented:
        found = ", ".join(f"{name} ({binary})" for name, binary in sorted(commented.items()))
        lines.append(f"found, left commented out: {found}; `agent-run init --detect` enables them")
    return "\n".join(lines)


@click.group("api")
def api_group() -> None:
    """The daemon: serve, stop, restart, status, or a service definition for your service manager."""


api_group.add_command(api_stop)
api_group.add_command(api_restart)


@api_group.command("serve")
@click.option("--autostarted", is_flag=True, hidden=True, help="started by a client's autostart")
@click.pass_context
def api_serve(ctx: click.Context, autostarted: bool) -> None:
    """Run the daemon in the foreground (one per home); clears an `api stop`'s mark."""
    from agent_run.daemon.serve import serve_forever

    # A bad config (ConfigInvalid), another daemon on the home (Conflict) or, autostarted, a
    # home the user stopped (DaemonUnavailable): the group's error line and exit 1, on stderr
    # unless --format json (a daemon's output goes to a terminal, a journal or daemon.out).
    session = _session(ctx)
    if session.chosen_output is None:
        session.output = "text"
    serve_forever(session.home, autostarted)


@api_group.command("bridge")
@click.pass_context
def api_bridge(ctx: click.Context) -> None:
    """Relay this home's daemon socket over stdin/stdout (what `ssh HOST agent-run api bridge`
    runs for a daemon on another machine; starts the daemon when none answers)."""
    from agent_run.cli.bridge import run_bridge

    sys.exit(run_bridge(_session(ctx).home))


@api_group.command("systemd")
@click.pass_context
def api_systemd(ctx: click.Context) -> None:
    """Print a systemd --user unit for the daemon."""
    from agent_run.cli.service_files import systemd_unit

    click.echo(systemd_unit(_session(ctx).home), nl=False)


@api_group.command("launchd")
@click.pass_context
def api_launchd(ctx: click.Context) -> None:
    """Print a launchd agent plist for the daemon."""
    from agent_run.cli.service_files import launchd_plist

    click.echo(launchd_plist(_session(ctx).home), nl=False)


@click.command("demo")
@click.option("--candidates", "count", default=3, show_default=True, type=click.IntRange(1, 10))
@click.pass_context
def demo_cmd(ctx: click.Context, count: int) -> None:
    """Quick start: a small ranked batch on the offline demo engine, shown live."""
    from agent_run.cli.quickstart import run_quickstart

    sys.exit(run_quickstart(_session(ctx), count))


@click.command("mcp")
@click.pass_context
def mcp_cmd(ctx: click.Context) -> None:
    """Serve the tool table as an MCP stdio server (a proxy to the daemon)."""
    from agent_run.mcp.server import run

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
@click.option(
    "--keep-alive",
    "keep_alive",
    default=15.0,
    show_default=True,
    type=click.FloatRange(0.5, 3600),
    metavar="SECONDS",
    help="quiet seconds before a live page's event stream gets a keep-alive comment "
    "(lower it behind a proxy that drops idle connections sooner)",
)
@click.pass_context
def web_cmd(ctx: click.Context, port: int, open_browser: bool, keep_alive: float) -> None:
    """Serve the web UI on 127.0.0.1 (a front-end of the daemon); prints its URL with a token."""
    from agent_run.web.app import run

    run(_session(ctx).home, port, open_browser, keep_alive)


def _leaves(command: click.Command) -> list[click.Command]:
    if isinstance(command, click.Group):
        return [leaf for sub in command.commands.values() for leaf in _leaves(sub)]
    return [command]


# What 0 / 1 / 64 mean for an admin verb whose help says more than the common words.
_EXIT_MEANS = {
    "doctor": {"ok": "every check ok", "error": "a check is bad, or an error"},
    "serve": {
        "ok": "stopped by SIGTERM or SIGINT",
        "error": "an error: config.toml is invalid, another daemon serves the home",
        "shown": "a line on stderr; with --format json a JSON error line",
    },
    "stop": {"error": "an error: a daemon holds the lock but does not answer, or did not stop"},
    "login": {
        "error": "an error, or the sign-in did not complete",
        "usage": "usage error, or no terminal for a browser sign-in",
    },
}


def register(group: click.Group, format_option: Any, home_option: Any) -> None:
    """Add the admin verbs to the generated group; every leaf verb takes `--home` after the
    verb, and its help ends with its exit statuses (`cli.exits`)."""
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
    for leaf in _leaves(group):
        if "--home" not in {o for p in leaf.params for o in getattr(p, "opts", ())}:
            leaf.params.append(home_option())
        if leaf.epilog is None:
            leaf.epilog = epilog({}, **_EXIT_MEANS.get(leaf.name or "", {}))
