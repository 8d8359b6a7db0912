"""The `agent-run` command line: one verb per tool of the table, plus admin verbs.

Verbs are generated from `tools.TOOLS` through its frozen copy `cli_spec.json` (so a verb
imports no pydantic); this module only maps spec params to click parameters, talks to the
daemon over the socket (`rpc.client`) and prints one JSON object per line, the daemon's JSON
passed through, or (`--format text`) the result model rendered by `cli_format`. What a verb
does beyond one call (`--wait`, `--follow`, slices, exit codes) is its tool's `CliExtras`.
"""

import json
import sys
import time
from typing import Any

import click

from agent_run import cli_spec
from agent_run.domain.errors import DomainError
from agent_run.home import Home

EXIT_ERROR = 1  # any error; each waiting verb's own exit statuses are its tool's `cli.exit_codes`


class Session:
    """What every verb needs: the home, the output format, and (lazily) a daemon client."""

    def __init__(self, home: str | None, output: str) -> None:
        self.home = Home.resolve(home)
        self.output = output
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from agent_run.rpc.client import connect

            self._client = connect(self.home)
            warn_version_skew(self._client.pong)
        return self._client

    def call(self, tool: str, params: dict[str, Any]) -> Any:
        """The tool's result model (imports the models: not for the plain-verb fast path)."""
        return self.client.call(tool, params)

    def run(self, tool: str, params: dict[str, Any], result_model: str) -> None:
        """One call, printed without importing pydantic (a plain verb's start-up): JSON passes
        the daemon's JSON through; text renders it as its result model (a `cli_format.Record`)."""
        result = self.client.call_raw(tool, params)
        if self.output == "json":
            click.echo(json.dumps(result, ensure_ascii=False))
        else:
            from agent_run.cli_format import Record, render

            click.echo(render(Record(result, result_model)))

    def emit(self, result: Any) -> None:
        if self.output == "json":
            click.echo(json.dumps(result.model_dump(mode="json"), ensure_ascii=False))
        else:
            from agent_run.cli_format import render

            click.echo(render(result))


def warn_version_skew(pong: dict[str, Any] | None) -> None:
    """Once per CLI call: this CLI and the daemon it talks to are different versions."""
    from agent_run import __version__

    if pong is not None and pong.get("version") != __version__:
        click.echo(
            f"agent-run: the daemon (pid {pong.get('pid')}) runs agent-run {pong.get('version')}, this "
            f"CLI is {__version__}: `agent-run api restart` starts the installed one (agents keep "
            "running)",
            err=True,
        )


_CLICK_TYPES = {"int": click.INT, "float": click.FLOAT, "bool": click.BOOL, "string": click.STRING}


def click_type(ptype: Any) -> Any:
    """The click type for a spec param type ("int", ... or {"choice": [...]})."""
    if isinstance(ptype, dict):
        return click.Choice(ptype["choice"])
    return _CLICK_TYPES[ptype]


def option_names(field: str) -> list[str]:
    names = [f"--{field.replace('_', '-')}"]
    if field.endswith("_seconds"):
        names.append(f"--{field.removesuffix('_seconds').replace('_', '-')}")
    return names


def click_params(spec_params: list[dict[str, Any]]) -> list[click.Parameter]:
    params: list[click.Parameter] = []
    for p in spec_params:
        name, ctype, required = p["name"], click_type(p["type"]), p["required"]
        if p["kind"] == "argument":
            params.append(click.Argument([name], type=ctype, required=required))
        elif p["kind"] == "flag":
            flag = name.replace("_", "-")
            params.append(
                click.Option([f"--{flag}/--no-{flag}", name], default=None, help=p["help"])
            )
        else:
            params.append(
                click.Option(
                    option_names(name) + [name],
                    type=ctype,
                    multiple=p["multiple"],
                    required=required,
                    help=p["help"],
                    show_default=not required,
                )
            )
    return params


def _given(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in kwargs.items()
        if v is not None and v != ()
    }


def _wait_until_done(
    session: Session, agent_id: str, timeout: float | None, extras: dict[str, Any]
) -> int:
    """Wait in slices (`WaitSlices`), print the last result; the exit status of its end state."""
    result = session.client.wait(agent_id, timeout, extras["slice_seconds"])
    session.emit(result)
    codes = extras["exit_codes"]
    return codes["timed_out"] if result.timed_out else codes[str(result.agent.state)]


def _follow_transcript(session: Session, params: dict[str, Any], _extras: dict[str, Any]) -> int:
    cursor = params.get("cursor", 0)
    while True:
        page = session.call("transcript", {**params, "cursor": cursor})
        for item in page.items:
            session.emit(item)
        cursor = page.next_cursor
        if page.finished:
            return 0
        if not page.items:
            time.sleep(0.25)


def _follow_batch(session: Session, params: dict[str, Any], extras: dict[str, Any]) -> int:
    from agent_run.cli_batch import follow_batch

    return follow_batch(session, params["batch_id"], extras["exit_codes"])


FOLLOWERS = {
    "transcript": _follow_transcript,
    "batch": _follow_batch,
}  # `--follow` by CliExtras.follow
FOLLOW_HELP = {
    "transcript": "keep printing until the agent ends",
    "batch": "draw live progress until the batch ends or is blocked",
}


def _set_format(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(Session).output = value


def format_option() -> click.Option:
    """`--format` accepted after the verb too (`agent-run agents --format text`)."""
    return click.Option(
        ["--format"],
        type=click.Choice(["json", "text"]),
        default=None,
        expose_value=False,
        callback=_set_format,
        is_eager=False,
        help="json (default): one object per line; text: for people",
    )


def extra_params(extras: dict[str, Any]) -> list[click.Parameter]:
    """`--format` on every verb, `--wait` and `--follow` where the tool's CLI extras ask."""
    params: list[click.Parameter] = [format_option()]
    if extras["wait_flag"]:
        params.append(
            click.Option(
                ["--wait", "wait_for_it"],
                is_flag=True,
                help="wait until the agent ends; exit 0/2/3 like `wait`",
            )
        )
    if extras["follow"]:
        params.append(click.Option(["--follow"], is_flag=True, help=FOLLOW_HELP[extras["follow"]]))
    return params


def make_command(tool: dict[str, Any]) -> click.Command:
    """The click command of one tool, from its entry in the frozen CLI spec (`cli_spec`)."""
    name, extras = tool["name"], tool["cli"]

    @click.pass_obj
    def callback(
        session: Session, wait_for_it: bool = False, follow: bool = False, **kwargs: Any
    ) -> None:
        params = _given(kwargs)
        if extras["waits"]:
            sys.exit(
                _wait_until_done(
                    session, params["agent_id"], params.get("timeout_seconds", 30.0), extras
                )
            )
        if follow:
            sys.exit(FOLLOWERS[extras["follow"]](session, params, extras))
        if not wait_for_it:
            session.run(name, params, tool["result"])
            return
        result = session.call(name, params)
        session.emit(result)
        sys.exit(_wait_until_done(session, result.id, None, extras))

    doc = tool["doc"]
    return click.Command(
        tool["verb"].split()[-1],
        callback=callback,
        help=doc,
        short_help=doc.split(". ")[0],
        params=click_params(tool["params"]) + extra_params(extras),
    )


class AgentRunGroup(click.Group):
    """Turns domain errors into one JSON error line (or a readable line) and exit code 1, and
    usage errors (a bad option value, a missing argument) into a JSON line too, exit code 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            text_wanted = "text" in sys.argv[1:] and "--format" in sys.argv[1:]
            param = getattr(exc, "param", None)
            if text_wanted or not isinstance(exc, click.UsageError):
                exc.show()
            else:
                field = param.name if param is not None else None
                error = {"code": "InvalidParams", "message": exc.format_message()}
                if field:
                    error["field"] = field
                click.echo(json.dumps({"error": error}))
            sys.exit(exc.exit_code)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DomainError as exc:  # every error the client maps, protocol ones included
            _print_error(ctx, exc.to_data())
        sys.exit(EXIT_ERROR)


def _print_error(ctx: click.Context, data: dict[str, Any]) -> None:
    """One JSON line on stdout, or with --format text one line on stderr: the code, the field,
    the message and (for a daemon bug) where its log is."""
    session = ctx.obj
    if isinstance(session, Session) and session.output == "json":
        click.echo(json.dumps({"error": data}))
        return
    details = data.get("details") or {}
    field = f" [{data['field']}]" if data.get("field") else ""
    rpc = f" ({details['rpc_code']})" if "rpc_code" in details else ""
    log = f"; daemon log: {details['log']}" if "log" in details else ""
    message = " ".join(str(data["message"]).split())
    click.echo(f"error: {data['code']}{rpc}{field}: {message}{log}", err=True)


@click.group(cls=AgentRunGroup)
@click.option(
    "--home", default=None, help="agent-run home (default: $AGENT_RUN_HOME or ~/.agent-run)"
)
@click.option(
    "--format",
    "output",
    type=click.Choice(["json", "text"]),
    default="json",
    help="json: one object per line (default); text: for people",
)
@click.version_option(package_name="agent-run")
@click.pass_context
def cli(ctx: click.Context, home: str | None, output: str) -> None:
    """agent-run: durable coding agents with verified answers."""
    ctx.obj = Session(home, output)


def command_for(group: click.Group, verb: str) -> click.Command | None:
    """The command at a (possibly nested) verb such as `batch start`."""
    node: click.Command | None = group
    for word in verb.split():
        node = node.commands.get(word) if isinstance(node, click.Group) else None
    return node


_GROUP_HELP = {
    "batch": "Batches: many agents in parallel git worktrees.",
    "run": "One run of a batch: stop, rerun, resume, follow up.",
    "folders": "Folders under the allowed roots: list them, inspect one as a project.",
}

for _tool in cli_spec.load():
    *_groups, _name = _tool["verb"].split()
    _parent: click.Group = cli
    for _word in _groups:
        if _word not in _parent.commands:
            _parent.add_command(click.Group(_word, help=_GROUP_HELP.get(_word)))
        _parent = _parent.commands[_word]  # type: ignore[assignment]
    _parent.add_command(make_command(_tool), _name)

from agent_run import cli_admin  # noqa: E402  (registers init, doctor, api, demo)

cli_admin.register(cli, format_option)


def main() -> None:
    cli(prog_name="agent-run")
