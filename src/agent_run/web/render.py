"""HTML rendering: the Jinja environment (autoescape always on), markdown without HTML, filters."""

import json
import time
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from agent_run.domain.batch_states import RunState

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


def run_facts(run: dict[str, Any]) -> str:
    """A run's result on one line of plain text (autoescaped): its diff stats, verify, tokens
    and cost, how long it ran. Built here, not in a macro: 50 runs' worth stays cheap."""
    parts = []
    if d := run.get("diff"):
        parts.append(
            f"{d['files']} file{'' if d['files'] == 1 else 's'} +{d['insertions']} "
            f"−{d['deletions']} · {d['commits']} commit{'' if d['commits'] == 1 else 's'}"
            + (f" · {d['uncommitted_files']} uncommitted" if d["uncommitted_files"] else "")
        )
    if run.get("verify_passed") is not None:
        parts.append("verify passed" if run["verify_passed"] else "verify FAILED")
    usage = run.get("usage") or {}
    if usage.get("executions"):
        cost = usage.get("cost_usd")
        parts.append(
            f"{usage['total_tokens']} tokens · "
            + (f"${cost:.4f}" if cost is not None else "cost unknown")
        )
    if run.get("duration_seconds") is not None and run.get("state") != RunState.RUNNING:
        parts.append(f"ran {round(run['duration_seconds'])} s")
    return " · ".join(parts)


def run_result(run: dict[str, Any]) -> Markup:
    """A run's result block on the batch page: what a running one is doing, its answer's start,
    its facts line, why its rank. Every text escaped; built here, not in a macro, so a 50-run
    page stays cheap (bench/bench_batch_view.py)."""
    parts = [f'<div class="result" data-result="{escape(run["id"])}">']
    activity = run.get("activity")
    if activity and run.get("state") == RunState.RUNNING:
        tool = f" {activity['tool']}" if activity.get("tool") else ""
        parts.append(
            f'<div class="doing"><span class="muted">doing ({escape(activity["kind"])}'
            f"{escape(tool)}, since {escape(ago(activity['since']))}):</span> "
            f"{escape(activity['text'])}</div>"
        )
    if run.get("answer_excerpt"):
        parts.append(f'<div class="excerpt">{escape(run["answer_excerpt"])}</div>')
    parts.append(f'<div class="facts-line muted">{escape(run_facts(run))}</div>')
    if run.get("rank_reason"):
        parts.append(
            f'<div class="why muted">Why #{escape(run.get("rank"))}: '
            f"{escape(run['rank_reason'])}</div>"
        )
    return Markup("".join(parts) + "</div>")  # noqa: S704 (every value escaped above)


def make_env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        markdown=markdown,
        ago=ago,
        clock=clock,
        pretty=pretty,
        compact=compact,
        run_facts=run_facts,
        run_result=run_result,
    )
    return env
