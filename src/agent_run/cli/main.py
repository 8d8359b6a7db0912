"""The `agent-run` command line: one verb per tool of the table, plus admin verbs.

Verbs are generated from `tools.TOOLS` through its frozen copy `cli/spec.json` (so a verb
imports no pydantic); this module only maps spec params to click parameters, talks to the
daemon over the socket (`rpc.client`) and prints one JSON object per line, the daemon's JSON
passed through, or (`--format text`) the result model rendered by `text.render`. What a verb
does beyond one call (`--wait`, `--follow`, slices, exit codes) is its tool's `CliExtras`.
"""

import json
import os
import sys
import time
from typing import Any

import click

from agent_run.cli import exits as cli_exits
from agent_run.cli import spec as cli_spec
from agent_run.cli.exits import EXIT_ERROR, EXIT_USAGE
from agent_run.cli.session import Session, cli_words
from agent_run.cli.text_input import TEXT_HELP, TextValue
from agent_run.domain.errors import DomainError

# Params naming a folder: a relative one is resolved against the CLI's current directory (the
# daemon's is not the user's).
PATH_PARAMS = frozenset({"workdir", "project", "worktree_root", "path"})


class JsonObject(click.ParamType):
    """An object field's value: a JSON object, inline or `@FILE` (a file holding one). Bad JSON
    is a usage error naming the option's field."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        text = str(value)
        if text.startswith("@"):
            try:
                text = open(os.path.expanduser(text[1:]), encoding="utf-8").read()
            except OSError as exc:
                self.fail(f"cannot read {text[1:]}: {exc.strerror}", param, ctx)
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            self.fail(f"not valid JSON ({exc}); give a JSON object or @FILE", param, ctx)
        if not isinstance(parsed, dict):
            self.fail(f"a JSON object is wanted, not {type(parsed).__name__}", param, ctx)
        return parsed


_CLICK_TYPES = {
    "int": click.INT,
    "float": click.FLOAT,
    "bool": click.BOOL,
    "string": click.STRING,
    "text": TextValue(),  # a Prose param: inline, @FILE or - (stdin)
    "json": JsonObject(),
}


def click_type(ptype: Any) -> Any:
    """The click type for a spec param type ("int", ... or {"choice": [...]})."""
    if isinstance(ptype, dict):
        return click.Choice(ptype["choice"])
    return _CLICK_TYPES[ptype]


def option_names(field: str, aliases: dict[str, str] | None = None) -> list[str]:
    """A field's flags: its alias first (`--text` for `prompt`), its own name, a short form."""
    names = [f"--{field.replace('_', '-')}"]
    if field.endswith("_seconds"):
        names.append(f"--{field.removesuffix('_seconds').replace('_', '-')}")
    alias = (aliases or {}).get(field)
    return [alias, *names] if alias else names


def _with_default(p: dict[str, Any]) -> str | None:
    """A param's help with its default: the daemon applies it (the CLI sends nothing)."""
    if p.get("default") is None or p["default"] == "":
        return p["help"]
    return f"{p['help'] or ''}  [default: {p['default']}]".strip()


RELATIVE = "absolute, or relative to the current directory"


def _path_help(text: str | None) -> str | None:
    """A folder param's help in the CLI, which makes a relative one absolute (PATH_PARAMS)
    where the table (the socket, MCP) wants it absolute."""
    if text is None:
        return None
    for absolute, either in (
        ("absolute path", f"path ({RELATIVE})"),
        ("an absolute folder", f"a folder ({RELATIVE})"),
    ):
        if absolute in text:
            return text.replace(absolute, either, 1)
    return f"{text} ({RELATIVE})"


def click_params(
    spec_params: list[dict[str, Any]], aliases: dict[str, str] | None = None
) -> list[click.Parameter]:
    params: list[click.Parameter] = []
    for p in spec_params:
        name, ctype, required = p["name"], click_type(p["type"]), p["required"]
        if name in PATH_PARAMS:
            p = {**p, "help": _path_help(p["help"])}
        if p["kind"] == "argument":  # a list (`batch compare BATCH RUN RUN...`) takes the rest
            nargs = -1 if p["multiple"] else 1
            params.append(click.Argument([name], type=ctype, required=required, nargs=nargs))
        elif p["kind"] == "flag":
            flag = name.replace("_", "-")
            params.append(
                click.Option([f"--{flag}/--no-{flag}", name], default=None, help=p["help"])
            )
        else:
            shown = _with_default(p)
            if p["type"] == "json":
                shown = f"{shown or ''} (a JSON object, or @FILE holding one)".strip()
            elif p["type"] == "text":
                shown = f"{shown or ''} ({TEXT_HELP})".strip()
            params.append(
                click.Option(
                    option_names(name, aliases) + [name],
                    type=ctype,
                    multiple=p["multiple"],
                    required=required,
                    help=shown,
                )
            )
    return params


def _given(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The params given on the command line; a relative folder made absolute against the cwd."""
    given = {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in kwargs.items()
        if v is not None and v != ()
    }
    if "host" in given and "workdir" in given:  # a path on the host, as given (its ~ is its own)
        return given
    for name in PATH_PARAMS & set(given):
        given[name] = os.path.abspath(os.path.expanduser(given[name]))
    return given


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
    shown: set[int] = set()  # turns whose prompt was printed (text only: JSON lines stay items)
    while True:
        page = session.call("transcript", {**params, "cursor": cursor})
        turns = [t for t in page.turns if t.number not in shown and session.output != "json"]
        for item in page.items:
            while turns and turns[0].number <= item.execution_number:
                shown.add(turns[0].number)
                session.emit(turns.pop(0))
            session.emit(item)
        if page.finished or not page.items:
            for turn in turns:
                shown.add(turn.number)
                session.emit(turn)
        cursor = page.next_cursor
        if page.finished:
            return 0
        if not page.items:
            time.sleep(0.25)


def _follow_batch(session: Session, params: dict[str, Any], extras: dict[str, Any]) -> int:
    from agent_run.cli.batch_follow import follow_batch

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


def _set_home(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(Session).set_home(value)


def home_option() -> click.Option:
    """`--home` accepted after the verb too (`agent-run agents --home /tmp/h`)."""
    return click.Option(
        ["--home"],
        default=None,
        expose_value=False,
        callback=_set_home,
        help="agent-run home (default: $AGENT_RUN_HOME or ~/.agent-run)",
    )


def format_option(human: bool = False) -> click.Option:
    """`--format` accepted after the verb too (`agent-run agents --format text`); a human verb
    (`CliExtras.human`: `doc`) prints text on a terminal unless told otherwise."""
    return click.Option(
        ["--format"],
        type=click.Choice(["json", "text"]),
        default=None,
        expose_value=False,
        callback=_set_format,
        is_eager=False,
        help="text for people (default on a terminal), or json: one object per line (default "
        "when piped)"
        if human
        else "json (default): one object per line; text: for people",
    )


def extra_params(extras: dict[str, Any]) -> list[click.Parameter]:
    """`--format` on every verb, `--wait` and `--follow` where the tool's CLI extras ask."""
    params: list[click.Parameter] = [format_option(extras["human"]), home_option()]
    if extras["wait_flag"]:
        params.append(
            click.Option(
                ["--wait", "wait_for_it"],
                is_flag=True,
                help="wait until the agent ends, then print what `wait` prints (the id goes to "
                "stderr at once); exit 0/2/3/4 like `wait`",
            )
        )
    if extras["follow"]:
        params.append(click.Option(["--follow"], is_flag=True, help=FOLLOW_HELP[extras["follow"]]))
    return params


def run_local(session: Session, name: str, params: dict[str, Any]) -> None:
    """A `cli.local` tool run in this process, without a daemon (its handler needs no ctx)."""
    import asyncio

    from pydantic import ValidationError

    from agent_run.domain.errors import error_from_data
    from agent_run.rpc.protocol import validation_error_data
    from agent_run.tools.table import TOOLS

    tool = TOOLS[name]
    try:
        parsed = tool.params.model_validate(params)
    except ValidationError as exc:
        raise error_from_data(validation_error_data(exc)) from None
    session.emit(asyncio.run(tool.resolve()(None, parsed)))


def verb_epilog(extras: dict[str, Any]) -> str:
    """The verb's `Exit status:` help paragraph (`cli.exits`)."""
    if extras["waits"]:
        return cli_exits.epilog(extras["exit_codes"])
    if extras["wait_flag"]:
        return cli_exits.epilog(extras["exit_codes"], "with --wait")
    if extras["follow"] and extras["exit_codes"]:
        return cli_exits.epilog(extras["exit_codes"], "with --follow")
    return cli_exits.epilog(extras["exit_codes"], outcomes=True)


def make_command(tool: dict[str, Any]) -> click.Command:
    """The click command of one tool, from its entry in the frozen CLI spec (`cli.spec`)."""
    name, extras = tool["name"], tool["cli"]
    flags = tuple(p["name"] for p in tool["params"] if p["kind"] == "flag")

    @click.pass_obj
    def callback(
        session: Session, wait_for_it: bool = False, follow: bool = False, **kwargs: Any
    ) -> None:
        params = _given(kwargs)
        session.autostart = session.restart_stopped = extras["starts_daemon"]
        session.flags = flags
        if extras["human"] and session.chosen_output is None and sys.stdout.isatty():
            session.output = "text"
        if extras["local"]:
            run_local(session, name, params)
            return
        if extras["waits"]:
            sys.exit(
                _wait_until_done(
                    session, params["agent_id"], params.get("timeout_seconds", 30.0), extras
                )
            )
        if follow:
            sys.exit(FOLLOWERS[extras["follow"]](session, params, extras))
        if not wait_for_it:
            result = session.run(name, params, tool["result"])
            if status := cli_exits.outcome_status(result, extras["exit_codes"]):
                sys.exit(status)
            return
        # One object on stdout, the same as `wait` prints; the id at once on stderr, for
        # whoever wants to steer or cancel it meanwhile.
        result = session.call(name, params)
        click.echo(f"agent-run: started {result.id}; waiting for it to end", err=True)
        sys.exit(_wait_until_done(session, result.id, None, extras))

    doc = cli_words(tool["doc"], flags)  # `confirm=true` in the table's doc: `--confirm` here
    return click.Command(
        tool["verb"].split()[-1],
        callback=callback,
        help=doc,
        short_help=doc.split(". ")[0],
        params=click_params(tool["params"], extras["aliases"]) + extra_params(extras),
        epilog=verb_epilog(extras),
    )


class AgentRunGroup(click.Group):
    """Turns domain errors into one JSON error line (or a readable line) and exit code 1, and
    usage errors (a bad option value, a missing argument) into a JSON line too, exit code 64
    (EX_USAGE: never a status `wait` gives an agent's end)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            text_wanted = chosen_format(sys.argv[1:]) == "text"
            param = getattr(exc, "param", None)
            if text_wanted or not isinstance(exc, click.UsageError):
                exc.show()
            else:
                field = param.name if param is not None else None
                error = {"code": "InvalidParams", "message": exc.format_message()}
                if field:
                    error["field"] = field
                click.echo(json.dumps({"error": error}))
            sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DomainError as exc:  # every error the client maps, protocol ones included
            _print_error(ctx, exc.to_data())
        sys.exit(EXIT_ERROR)


def chosen_format(argv: list[str]) -> str | None:
    """The last `--format X` or `--format=X` on a command line click could not parse (a usage
    error is printed before any callback has read it)."""
    chosen = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--format" and i + 1 < len(argv):
            chosen = argv[i + 1]
        elif arg.startswith("--format="):
            chosen = arg.removeprefix("--format=")
    return chosen


def _print_error(ctx: click.Context, data: dict[str, Any]) -> None:
    """One JSON line on stdout, or with --format text one line on stderr: the code, the field,
    the message and (for a daemon bug) where its log is."""
    session = ctx.obj
    if isinstance(session, Session):
        data = {**data, "message": cli_words(str(data["message"]), session.flags)}
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
    default=None,
    help="json: one object per line (default; `doc` on a terminal: text); text: for people",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: print_version(ctx) if value else None,
    help="Print the version (and the commit, when run from a git checkout) and exit.",
)
@click.pass_context
def cli(ctx: click.Context, home: str | None, output: str | None) -> None:
    """agent-run: durable coding agents with verified answers."""
    ctx.obj = Session(home, output)


def print_version(ctx: click.Context) -> None:
    """`agent-run 0.2.0`, and ` (commit abc1234, modified)` when run from a git checkout."""
    from agent_run import __version__

    click.echo(f"agent-run {__version__}{checkout_commit()}")
    ctx.exit()


def checkout_commit() -> str:
    """The checkout's commit when this package runs from one (an editable install), else ''."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return ""
    try:
        git = ["git", "-C", str(root)]
        sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "src"], capture_output=True)
    except OSError:
        return ""
    if sha.returncode != 0:
        return ""
    return f" (commit {sha.stdout.strip()}{', modified' if dirty.stdout.strip() else ''})"


def command_for(group: click.Group, verb: str) -> click.Command | None:
    """The command at a (possibly nested) verb such as `batch start`."""
    node: click.Command | None = group
    for word in verb.split():
        node = node.commands.get(word) if isinstance(node, click.Group) else None
    return node


_GROUP_HELP = {
    "batch": "Batches: many agents in parallel git worktrees.",
    "run": "One run of a batch: show, answer, stop, rerun, resume, follow up.",
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

from agent_run.cli import admin as cli_admin  # noqa: E402  (registers init, doctor, api, demo)

cli_admin.register(cli, format_option, home_option)


def main() -> None:
    cli(prog_name="agent-run")
