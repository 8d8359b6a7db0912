"""HTML rendering: the Jinja environment (autoescape always on), markdown without HTML, filters."""

import json
import time
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup

TEMPLATES = Path(__file__).parent / "templates"
# CommonMark with raw HTML off: an agent's `<script>` comes out as text; javascript: links are
# refused by markdown-it's link validation.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})


def markdown(text: str | None) -> Markup:
    return Markup(_MARKDOWN.render(text or ""))  # noqa: S704 (html is off: the output is escaped)


def ago(ts: float | None) -> str:
    if not ts:
        return ""
    seconds = max(0, int(time.time() - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def clock(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


def make_env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(markdown=markdown, ago=ago, clock=clock, pretty=pretty, compact=compact)
    return env
