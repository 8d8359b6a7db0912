"""Text that any UTF-8 writer can take: lone UTF-16 surrogates made U+FFFD.

JSON may escape a lone surrogate (`"\\ud800"`, half of a pair a provider cut), `json.loads`
keeps it, and SQLite, a file or a reply cannot encode it as UTF-8. What an engine or its
worker-tools client sends goes through `well_formed` before anything stores it.
"""

import dataclasses
import re
from typing import TypeVar, cast

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_T = TypeVar("_T")


def may_hold_surrogates(json_text: str) -> bool:
    """Whether decoding this JSON can yield a lone surrogate: only a `\\u` escape makes one."""
    return "\\u" in json_text


def well_formed(value: _T) -> _T:
    """`value` (a str, a dict or list of them, a dataclass of those) with each lone surrogate
    made U+FFFD; a valid pair was already one character when decoded."""
    if isinstance(value, str):
        return cast(_T, _LONE_SURROGATE.sub("\ufffd", value))
    if isinstance(value, dict):
        return cast(_T, {well_formed(k): well_formed(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return cast(_T, type(value)(well_formed(v) for v in value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: well_formed(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return cast(_T, dataclasses.replace(value, **changes))
    return value
