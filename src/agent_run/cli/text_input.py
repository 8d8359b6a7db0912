"""A text option's value (`--task`, `--prompt`, `--text`, ...): inline, `@FILE` or `-` (stdin).

A long task cannot be an argument (Linux caps one at 128 KiB, all of them at ~2 MiB), so every
text param of the tool table (`domain.requests.Prose`, type "text" in `cli/spec.json`) also
takes `@FILE` (the file's contents, UTF-8) or `-` (standard input, for one option of a
command); `@@...` is a text that really starts with `@` (one `@` is dropped). A file that cannot
be read, or is not UTF-8, is a usage error naming the option.
"""

import os
import sys
from typing import Any

import click

TEXT_HELP = "TEXT, @FILE for a file's contents, or - for stdin; @@ for a text starting with @"
_STDIN_TAKEN = "agent_run.stdin_taken_by"  # ctx.meta key: the option that read stdin


class TextValue(click.ParamType):
    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if text.startswith("@@"):
            return text[1:]
        if text == "-":
            return self._stdin(param, ctx)
        if text.startswith("@"):
            return self._file(text[1:], param, ctx)
        return text

    def _file(self, name: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        path = os.path.expanduser(name)
        if not name:
            self.fail("@ needs a file name (@FILE); @@ starts a text with @", param, ctx)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            self.fail(f"cannot read {name}: {exc.strerror}", param, ctx)
        return self._decode(data, name, param, ctx)

    def _stdin(self, param: click.Parameter | None, ctx: click.Context | None) -> str:
        meta = ctx.meta if ctx is not None else {}
        taken = meta.get(_STDIN_TAKEN)
        if taken is not None:
            self.fail(f"standard input (-) is already the value of {taken}", param, ctx)
        meta[_STDIN_TAKEN] = _flag(param)
        return self._decode(sys.stdin.buffer.read(), "standard input", param, ctx)

    def _decode(
        self, data: bytes, source: str, param: click.Parameter | None, ctx: click.Context | None
    ) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail(f"{source} is not UTF-8 text (byte {exc.start})", param, ctx)


def _flag(param: click.Parameter | None) -> str:
    if isinstance(param, click.Option) and param.opts:
        return param.opts[0]
    return param.name or "another option" if param is not None else "another option"
