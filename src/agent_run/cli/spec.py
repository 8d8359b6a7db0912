"""The CLI's view of the tool table, frozen to `cli/spec.json` so a verb starts without pydantic.

`build()` derives it from `tools.TOOLS` (pydantic fields -> click parameter descriptions; a
`Prose` field is of type "text", which the CLI also reads from `@FILE` or stdin);
`load()` reads the committed file, stdlib only. Each tool's `cli` holds its CLI extras
(`tools.CliExtras`: `--wait`, `--follow`, slices, exit codes), and `result` the name of its
result model, which keys its text renderer (`text.render.RENDERERS`). A test fails when they differ: after changing
a tool's params or doc run `python -m agent_run.cli.spec` to rewrite the file.
"""

import dataclasses
import json
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Literal

SPEC_FILE = Path(__file__).with_name("spec.json")


def load() -> list[dict[str, Any]]:
    return json.loads(SPEC_FILE.read_text())


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_object(annotation: Any) -> bool:
    """Whether a field takes a JSON object: a model, a dict, or a (discriminated) union of them."""
    from pydantic import BaseModel

    if typing.get_origin(annotation) is typing.Annotated:
        return _is_object(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(_is_object(a) for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) is dict or annotation is dict:
        return True
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def param_type(annotation: Any) -> tuple[Any, bool]:
    """(type name or {"choice": [...]}, multiple) for a pydantic field annotation; "json" for
    an object field (the CLI parses the option's value as a JSON object)."""
    annotation = _unwrap_optional(annotation)
    if _is_object(annotation):
        return "json", False
    if typing.get_origin(annotation) is list:
        inner, _ = param_type(typing.get_args(annotation)[0])
        return inner, True
    if typing.get_origin(annotation) is Literal:
        return {"choice": [str(a) for a in typing.get_args(annotation)]}, False
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {"choice": [m.value for m in annotation]}, False
    return {int: "int", float: "float", bool: "bool"}.get(annotation, "string"), False


def _params(tool: Any) -> list[dict[str, Any]]:
    from agent_run.domain.requests import PROSE

    params = []
    for name, field in tool.params.model_fields.items():
        ptype, multiple = param_type(field.annotation)
        if PROSE in field.metadata:  # a text a person writes: inline, @FILE or - (stdin)
            ptype = "text"
        kind = (
            "argument"
            if name in tool.positional
            else "flag"
            if _unwrap_optional(field.annotation) is bool
            else "option"
        )
        params.append(
            {
                "name": name,
                "kind": kind,
                "type": ptype,
                "multiple": multiple,
                "required": field.is_required(),
                "help": field.description,
                "default": _shown_default(field.default),
            }
        )
    return params


def _shown_default(default: Any) -> Any:
    """A field's default as `--help` shows it (the daemon applies it: the CLI sends nothing)."""
    if isinstance(default, Enum):
        return default.value
    return default if isinstance(default, str | int | float) else None


def _extras(tool: Any) -> dict[str, Any]:
    """The tool's CLI extras (exit codes and aliases as maps)."""
    extras = dataclasses.asdict(tool.cli)
    extras["exit_codes"] = dict(extras["exit_codes"])
    extras["aliases"] = dict(extras["aliases"])
    return extras


def build() -> list[dict[str, Any]]:
    from agent_run.tools.table import TOOLS

    return [
        {
            "name": t.name,
            "verb": t.cli_verb,
            "doc": t.doc,
            "params": _params(t),
            "cli": _extras(t),
            "result": t.result.__name__,
        }
        for t in TOOLS.values()
    ]


def write() -> None:
    SPEC_FILE.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write()
