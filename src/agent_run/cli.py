"""The `agent-run` command line: one verb per tool of the table, plus admin verbs.

Verbs are generated from `tools.TOOLS` through its frozen copy `cli_spec.json` (so a verb
imports no pydantic); this module only maps spec params to click parameters, talks to the
daemon over the socket and prints one JSON object per line (`--format text` for people, see
`cli_format`).
"""

import json
import sys
import time
from typing import Any

import click

from agent_run import cli_format, cli_spec
from agent_run.domain.errors import DomainError
from agent_run.domain.states import ExecutionState as S
from agent_run.home import Home

# Exit codes of `wait` and `start --wait`.
EXIT_SUCCEEDED, EXIT_ERROR, EXIT_FAILED, EXIT_CANCELLED, EXIT_RUNNING = 0, 1, 2, 3, 4
_STATE_EXIT = {S.SUCCEEDED: EXIT_SUCCEEDED, S.FAILED: EXIT_FAILED, S.LOST: EXIT_FAILED,
               S.CANCELLED: EXIT_CANCELLED}


class Session:
    """What every verb needs: the home, the output format, and (lazily) a daemon client."""

    def __init__(self, home: str | None, output: str) -> None:
        self.home = Home.resolve(home)
        self.output = output
        self._client = None

    def call(self, method: str, params: dict[str, Any]) -> Any:
        if self._client is None:
            from agent_run.rpc.client import connect

            self._client = connect(self.home)
        return self._client.call(method, params)

    def emit(self, kind: str, data: Any) -> None:
        if self.output == "json":
            click.echo(json.dumps(data, ensure_ascii=False))
        else:
            click.echo(cli_format.render(kind, data))


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
            params.append(click.Option([f"--{flag}/--no-{flag}", name], default=None, help=p["help"]))
        else:
            params.append(click.Option(option_names(name) + [name], type=ctype, multiple=p["multiple"],
                                       required=required, help=p["help"], show_default=not required))
    return params


def _given(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()
            if v is not None and v != ()}


def _run_tool(session: Session, name: str, params: dict[str, Any]) -> Any:
    result = session.call(name, params)
    session.emit(name, result)
    return result


def _wait_until_done(session: Session, agent_id: str, timeout: float | None) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        chunk = 60.0 if deadline is None else max(0.0, min(60.0, deadline - time.monotonic()))
        result = session.call("wait", {"agent_id": agent_id, "timeout_seconds": chunk})
        if not result["timed_out"] or (deadline is not None and time.monotonic() >= deadline):
            session.emit("wait", result)
            return EXIT_RUNNING if result["timed_out"] else _STATE_EXIT[result["agent"]["state"]]


def _follow_transcript(session: Session, params: dict[str, Any]) -> None:
    cursor = params.get("cursor", 0)
    while True:
        page = session.call("transcript", {**params, "cursor": cursor})
        for item in page["items"]:
            session.emit("transcript_item", item)
        cursor = page["next_cursor"]
        if page["finished"]:
            return
        if not page["items"]:
            time.sleep(0.25)


def _set_format(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(Session).output = value


def format_option() -> click.Option:
    """`--format` accepted after the verb too (`agent-run agents --format text`)."""
    return click.Option(["--format"], type=click.Choice(["json", "text"]), default=None,
                        expose_value=False, callback=_set_format, is_eager=False,
                        help="json (default): one object per line; text: for people")


def make_command(tool: dict[str, Any]) -> click.Command:
    """The click command of one tool, from its entry in the frozen CLI spec (`cli_spec`)."""
    name = tool["name"]
    extra: list[click.Parameter] = [format_option()]
    if name == "start":
        extra.append(click.Option(["--wait", "wait_for_it"], is_flag=True,
                                  help="wait until the agent ends; exit 0/2/3 like `wait`"))
    if name == "transcript":
        extra.append(click.Option(["--follow"], is_flag=True, help="keep printing until the agent ends"))
    if name == "batch":
        extra.append(click.Option(["--follow"], is_flag=True,
                                  help="draw live progress until the batch ends or is blocked"))

    @click.pass_obj
    def callback(session: Session, wait_for_it: bool = False, follow: bool = False, **kwargs: Any) -> None:
        params = _given(kwargs)
        if name == "wait":
            sys.exit(_wait_until_done(session, params["agent_id"], params.get("timeout_seconds", 30.0)))
        if name == "transcript" and follow:
            _follow_transcript(session, params)
            return
        if name == "batch" and follow:
            from agent_run.cli_batch import follow_batch

            sys.exit(follow_batch(session, params["batch_id"]))
        result = _run_tool(session, name, params)
        if name == "start" and wait_for_it:
            sys.exit(_wait_until_done(session, result["id"], None))

    doc = tool["doc"]
    return click.Command(tool["verb"].split()[-1], callback=callback, help=doc, short_help=doc.split(". ")[0],
                         params=click_params(tool["params"]) + extra)


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
        from agent_run.rpc.client import RpcError

        try:
            return super().invoke(ctx)
        except DomainError as exc:
            _print_error(ctx, exc.to_data())
        except RpcError as exc:  # an untyped protocol error: still one line, never a traceback
            _print_error(ctx, {"code": "ProtocolError", "message": exc.message, "details": {"rpc_code": exc.code}})
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
@click.option("--home", default=None, help="agent-run home (default: $AGENT_RUN_HOME or ~/.agent-run)")
@click.option("--format", "output", type=click.Choice(["json", "text"]), default="json",
              help="json: one object per line (default); text: for people")
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


_GROUP_HELP = {"batch": "Batches: many agents in parallel git worktrees.",
               "run": "One run of a batch: stop, rerun, resume, follow up.",
               "folders": "Folders under the allowed roots: list them, inspect one as a project."}

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
