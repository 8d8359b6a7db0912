"""The CLI's per-call state: the home, the output format and (lazily) the one daemon client."""

import json
import re
from collections.abc import Iterable
from typing import Any

import click

from agent_run.system.home import Home


class Session:
    """What every verb needs: the home, the output format, and (lazily) a daemon client."""

    def __init__(self, home: str | None, output: str | None) -> None:
        self.home = Home.resolve(home)
        self.chosen_output = output  # None: the verb's default (json, or text for a human verb)
        # A daemon stopped by `api stop` is started again by the user's verb, except by a
        # question about the daemon (`api status`, `doctor`): that says it is stopped. And
        # `api status` starts none at all (`CliExtras.starts_daemon`).
        self.restart_stopped = True
        self.autostart = True
        self.flags: tuple[str, ...] = ()  # the verb's flag params, for `cli_words`
        self._client: Any = None

    @property
    def output(self) -> str:
        return self.chosen_output or "json"

    @output.setter
    def output(self, value: str) -> None:
        self.chosen_output = value

    def set_home(self, home: str) -> None:
        """`--home` given after the verb (before any call: the client is made lazily)."""
        self.home = Home.resolve(home)

    @property
    def client(self) -> Any:
        if self._client is None:
            from agent_run.rpc.autostart import connect

            client = connect(
                self.home, autostart=self.autostart, restart_stopped=self.restart_stopped
            )
            # A question about the daemon (`api status`, `doctor`) is answered across versions.
            check_version_skew(client, refuse=self.autostart and self.restart_stopped)
            self._client = client
        return self._client

    def call(self, tool: str, params: dict[str, Any]) -> Any:
        """The tool's result model (imports the models: not for the plain-verb fast path)."""
        return self.client.call(tool, params)

    def run(self, tool: str, params: dict[str, Any], result_model: str) -> Any:
        """One call, printed without importing pydantic (a plain verb's start-up): JSON passes
        the daemon's JSON through; text renders it as its result model (a `text.render.Record`).
        The daemon's JSON, for the verb's exit status (`cli.exits.outcome_status`)."""
        result = self.client.call_raw(tool, params)
        if isinstance(result, dict) and isinstance(result.get("message"), str):
            result = {**result, "message": cli_words(result["message"], self.flags)}
        if self.output == "json":
            click.echo(json.dumps(result, ensure_ascii=False))
        else:
            from agent_run.text.render import Record, render

            click.echo(render(Record(result, result_model)))
        return result

    def emit(self, result: Any) -> None:
        if self.output == "json":
            click.echo(json.dumps(result.model_dump(mode="json"), ensure_ascii=False))
        else:
            from agent_run.text.render import render

            click.echo(render(result))


def cli_words(text: str, flags: Iterable[str]) -> str:
    """A tool's doc or message in the CLI's words: a param the daemon names `name=true` (the
    socket's and MCP's form) becomes the verb's flag `--name` (`name=false`: `--no-name`)."""
    for name in flags:
        dashed = name.replace("_", "-")
        text = re.sub(rf"\b{name}=true\b", f"--{dashed}", text)
        text = re.sub(rf"\b{name}=false\b", f"--no-{dashed}", text)
    return text


def check_version_skew(client: Any, *, refuse: bool) -> None:
    """This CLI and the home's daemon must be one version: another version's daemon may not
    know this CLI's params or results. Refused (`DaemonVersionMismatch`), or only said on stderr
    for a question about the daemon itself."""
    from agent_run import __version__

    pong = client.pong
    if pong is None or pong.get("version") == __version__:
        return
    message = (
        f"the daemon for this home (pid {pong.get('pid')}) runs agent-run {pong.get('version')}, "
        f"this CLI is {__version__}: run `agent-run api restart` to start this version (running "
        "agents keep running)"
    )
    if not refuse:
        click.echo(f"agent-run: {message}", err=True)
        return
    from agent_run.domain.errors import DaemonVersionMismatch

    client.close()
    raise DaemonVersionMismatch(
        message, local=__version__, remote=pong.get("version"), pid=pong.get("pid")
    )
