"""Posted HTML forms to tool params: types from the params model, empty fields left out."""

import types
import typing
from typing import Any

from pydantic import BaseModel


def _base(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def form_params(model: type[BaseModel], form: dict[str, str]) -> dict[str, Any]:
    """Each non-empty field of the form that the model has; ints, floats and checkboxes converted.

    A value that does not convert is passed on as text, so the tool's own validation names the
    field and says what is wrong (the same message as on every other transport). Line breaks
    come as the user typed them (LF), not as the browser posts them (CRLF)."""
    params: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        kind = _base(field.annotation)
        if kind is bool:
            if name in form:
                params[name] = form[name] in ("on", "true", "1", "yes")
            continue
        # A browser posts a textarea's line breaks as CRLF: the tool gets the text as typed.
        raw = form.get(name, "").strip() if kind is not str else form.get(name, "")
        raw = raw.replace("\r\n", "\n")
        if raw == "" or (kind is str and not raw.strip()):
            continue
        converter = {int: int, float: float}.get(kind)
        try:
            params[name] = converter(raw) if converter else raw
        except ValueError:
            params[name] = raw
    return params


def batch_form(form: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The new-batch form as `batch_start` reads it, and where each tool field's error shows.

    A generated batch's `prompt` is its generator's instruction: the form has a field of that
    name, sent as `prompt` (the Prompt field is for the other workflows)."""
    instruction = form.get("generator_instruction", "")
    if form.get("workflow") != "generated" or not instruction.strip():
        return form, {}
    if form.get("prompt", "").strip():
        raise ValueError("a generated batch takes the generator instruction; leave Prompt empty")
    return {**form, "prompt": instruction}, {"prompt": "generator_instruction"}


NOTIFY_FIELDS = {"argv": "notify_argv", "thread_id": "notify_thread_id"}


def notify_target(form: dict[str, str]) -> dict[str, Any] | None:
    """The form's optional completion notice as `start`'s / `batch_start`'s `notify`: a command
    (one argument a line; it gets the notice JSON on stdin) or a Codex thread. The tool checks it."""
    transport = form.get("notify_transport", "").strip()
    if not transport:
        return None
    if transport == "command":
        argv = [line.rstrip("\r") for line in form.get("notify_argv", "").split("\n")]
        return {"transport": transport, "argv": [a for a in argv if a.strip()]}
    if transport == "codex_queue":
        return {"transport": transport, "thread_id": form.get("notify_thread_id", "").strip()}
    return {"transport": transport}  # refused by the tool, by name


def notify_field(name: str) -> str:
    """Where a tool error on `notify...` shows on the form (`notify.command.argv` -> notify_argv)."""
    if name != "notify" and not name.startswith("notify."):
        return name
    return NOTIFY_FIELDS.get(name.rsplit(".", 1)[-1], "notify_transport")
