"""Human-readable rendering of tool results (`--format text`, MCP's text content): one render
function per result model, looked up in `RENDERERS` by the model's class name; a result without
one prints as JSON.

A renderer reads the result's fields as attributes, so it takes the pydantic model (MCP, the
CLI's waits and follows) or a `Record` of the daemon's JSON with that model's name (a plain CLI
verb, which must start without importing pydantic; see `cli_spec`).
"""

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent_run.cli_accounts_format import RENDERERS as ACCOUNT_RENDERERS
from agent_run.cli_batch import render_batch

if TYPE_CHECKING:
    from agent_run.domain import batch_models as bm
    from agent_run.domain import views as vw


class Record:
    """A result model's JSON read through attributes, like the model (`r.execution.number`)."""

    __slots__ = ("_data", "_model")  # underscored: no model field can shadow them

    def __init__(self, data: dict[str, Any], model: str) -> None:
        self._data, self._model = data, model

    def __getattr__(self, name: str) -> Any:
        try:
            return _wrap(self._data[name])
        except KeyError:
            raise AttributeError(name) from None


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Record(value, "")
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def _ago(ts: float | None) -> str:
    if ts is None:
        return "-"
    seconds = max(0, int(time.time() - ts))
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h ago"


def _s(value: Any) -> str:
    """An enum member's value (states, kinds), anything else as text."""
    return str(getattr(value, "value", value))


def _get(result: Any, name: str) -> Any:
    """A field a result from an older daemon may lack."""
    return getattr(result, name, None)


def agent(a: "vw.AgentView") -> str:
    ex = a.execution
    lines = [
        f"{a.id}  {_s(a.state)}" + (f" ({_s(a.failure_kind)})" if a.failure_kind else ""),
        f"  runtime {a.runtime} / {a.model}"
        + (f"  account {a.account}" if _get(a, "account") else "")
        + f"  profile {_s(a.profile)}  created {_ago(a.created_at)}",
        f"  workdir {a.workdir}",
        f"  task    {a.task.splitlines()[0][:100] if a.task else ''}",
        f"  execution #{ex.number} {ex.id}  events {a.event_count}",
    ]
    if ex.failure_advice:
        lines.append(f"  why     {ex.failure_message or ''}")
        lines.append(f"  advice  {ex.failure_advice}")
    if a.verdict:
        lines.append(f"  verdict {_s(a.verdict)} (from the worker tool `finish`)")
    if ex.answer_sha256:
        lines.append(f"  answer  {ex.answer_bytes} bytes, sha256 {ex.answer_sha256}")
        if ex.answer_verified is False:
            lines.append(
                "  answer  NOT VERIFIED: answer.md no longer matches its sha256"
                " (see its integrity_failed event)"
            )
    elif a.last_message:
        lines.append(f"  last    {a.last_message.splitlines()[0][:100]}")
    return "\n".join(lines)


def wait_result(w: "vw.WaitResult") -> str:
    return ("still running (timed out)\n" if w.timed_out else "") + agent(w.agent)


def agent_list(page: "vw.AgentList") -> str:
    rows = [
        f"{i.id}  {_s(i.state):<10} {i.runtime:<8} {_ago(i.created_at):>8}  {i.task_preview[:60]}"
        + ("  [answer NOT VERIFIED]" if i.answer_verified is False else "")
        for i in page.items
    ]
    return "\n".join(rows + [f"{len(page.items)} of {page.total} agents"])


def answer(a: "vw.AnswerView") -> str:
    return f"{a.text}\n-- verified: {a.bytes} bytes, sha256 {a.sha256}"


def transcript_item(item: "vw.TranscriptItem") -> str:
    return item.role + (f"[{item.name}]" if item.name else "") + f": {item.content}"


def transcript(page: "vw.TranscriptPage") -> str:
    return "\n".join(transcript_item(i) for i in page.items)


def events(page: "vw.EventsPage") -> str:
    return "\n".join(
        f"{e.seq:>6}  {e.kind:<16} {e.execution_id}  {json.dumps(_plain(e.data), ensure_ascii=False)}"
        for e in page.items
    )


def _plain(value: Any) -> Any:
    return value._data if isinstance(value, Record) else value


def agent_message(result: "vw.CancelResult | vw.SteerResult") -> str:
    return f"{result.agent_id}: {result.message}"


def batch_list(page: "bm.BatchList") -> str:
    rows = [
        f"{i.id}  {_s(i.workflow):<9} {_s(i.state):<9} {i.runs:>3} runs  {_ago(i.created_at)}"
        for i in page.items
    ]
    return "\n".join(rows + [f"{len(page.items)} of {page.total} batches"])


def run_action(result: "bm.RunActionResult") -> str:
    return f"{result.run.id} ({result.run.title}): {result.message}"


def batch_review(review: "bm.BatchReview") -> str:
    parts = []
    for run in review.runs:
        parts.append(f"== {run.title} ({run.branch}) {len(run.commits)} commit(s)")
        parts.append(run.diff or "(no changes to tracked files)")
        parts += [f"?? {u.path}" for u in run.untracked]
    return "\n".join(parts)


def batch_clean(result: "bm.BatchCleanResult") -> str:
    rows = [
        f"{i.action:<12} {i.worktree}  dirty {len(i.dirty_files)}  unmerged {i.unmerged_commits}"
        for i in result.items
    ]
    return "\n".join(rows + [result.message])


def dir_listing(listing: "bm.DirListing") -> str:
    return "\n".join(
        [listing.path or "(roots)"]
        + [f"  {e.name}{'  (git)' if e.is_repository else ''}" for e in listing.entries]
    )


def daemon_status(s: Any) -> str:
    lines = [
        f"daemon pid {s.pid}, agent-run {s.version}, up {s.uptime_seconds:.0f}s, serving {s.home}",
        f"config {s.config_path if s.config_file_exists else '(built-in defaults)'} "
        f"revision {s.config_revision}",
        f"{s.live_agents} live agent(s)",
    ]
    if s.config_refused is not None:
        lines.append(
            f"REFUSED config revision {s.config_refused.revision}: {s.config_refused.message} "
            f"(running with revision {s.config_revision})"
        )
    return "\n".join(lines)


# --- capacity (docs/capacity.md)
def _pct(value: Any) -> str:
    return "    ?" if value is None else f"{value:4.0f}%"


def limits(result: Any) -> str:
    rows = [
        f"{w.runtime}{'/' + w.account if w.account else ''}  {w.lane}  {w.window:<4} {_pct(w.remaining_percent)}"
        f"  {w.risk:<7} {w.advice}"
        for w in result.windows
    ]
    return "\n".join(rows or ["no readings yet: `agent-run capacity collect`, or run an agent"])


def capacity_order(result: Any) -> str:
    rows = [
        f"{n}. {r.runtime}{'/' + r.account if r.account else ''}  {r.lane}  priority {r.priority:.2f}"
        f"  (score {r.score:.2f} x weight {r.weight:g}; {r.limiting_window} {_pct(r.remaining_percent).strip()})"
        for n, r in enumerate(result.routes, 1)
    ]
    rows += [f"omitted  {a.runtime}  {a.lane}: {a.reason}" for a in result.omitted]
    rows += [f"deferred {a.runtime}  {a.lane}: {a.reason}" for a in result.deferred]
    rows += [f"unavailable {name}: no reading" for name in result.unavailable_runtimes]
    if result.insufficient_diversity:
        rows.append("insufficient diversity: fewer than two pools can take new work")
    return "\n".join(rows)


def collect_result(result: Any) -> str:
    return (
        "\n".join(
            f"{s.runtime}  {s.source}: "
            + (f"{s.windows} window(s)" if s.error is None else f"no evidence ({s.error})")
            for s in result.sources
        )
        or "no runtime has a command or codex_appserver source"
    )


# --- end capacity


RENDERERS: dict[str, Callable[[Any], str]] = {  # result model class name -> renderer
    "AgentView": agent,
    "WaitResult": wait_result,
    "AgentList": agent_list,
    "AnswerView": answer,
    "TranscriptPage": transcript,
    "TranscriptItem": transcript_item,
    "EventsPage": events,
    "CancelResult": agent_message,
    "SteerResult": agent_message,
    "DocResult": lambda d: d.text,
    "BatchView": render_batch,
    "BatchList": batch_list,
    "RunActionResult": run_action,
    "BatchReview": batch_review,
    "BatchCleanResult": batch_clean,
    "DirListing": dir_listing,
    "DaemonStatus": daemon_status,
    "LimitsResult": limits,
    "CapacityOrderResult": capacity_order,
    "CollectResult": collect_result,
    **ACCOUNT_RENDERERS,
}


def render(result: Any) -> str:
    """The text of a result model (or of a `Record`): its renderer, or its JSON when it has none."""
    if isinstance(result, Record):
        renderer = RENDERERS.get(result._model)
        return (
            renderer(result) if renderer else json.dumps(result._data, indent=1, ensure_ascii=False)
        )
    renderer = RENDERERS.get(type(result).__name__)
    return renderer(result) if renderer else result.model_dump_json(indent=1)
