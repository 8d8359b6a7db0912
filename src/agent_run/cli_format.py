"""Human-readable rendering of tool results (`--format text`, MCP's text content): one render
function per result model type, looked up in `RENDERERS`; a model without one prints as JSON."""

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from agent_run.cli_batch import render_batch
from agent_run.domain import batch_models as bm
from agent_run.domain import views as vw


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


def agent(a: vw.AgentView) -> str:
    ex = a.execution
    lines = [f"{a.id}  {_s(a.state)}" + (f" ({_s(a.failure_kind)})" if a.failure_kind else ""),
             f"  runtime {a.runtime} / {a.model}  profile {_s(a.profile)}  created {_ago(a.created_at)}",
             f"  workdir {a.workdir}",
             f"  task    {a.task.splitlines()[0][:100] if a.task else ''}",
             f"  execution #{ex.number} {ex.id}  events {a.event_count}"]
    if ex.failure_advice:
        lines.append(f"  why     {ex.failure_message or ''}")
        lines.append(f"  advice  {ex.failure_advice}")
    if a.verdict:
        lines.append(f"  verdict {_s(a.verdict)} (from the worker tool `finish`)")
    if ex.answer_sha256:
        lines.append(f"  answer  {ex.answer_bytes} bytes, sha256 {ex.answer_sha256}")
        if ex.answer_verified is False:
            lines.append("  answer  NOT VERIFIED: answer.md no longer matches its sha256 (see its integrity_failed event)")
    elif a.last_message:
        lines.append(f"  last    {a.last_message.splitlines()[0][:100]}")
    return "\n".join(lines)


def wait_result(w: vw.WaitResult) -> str:
    return ("still running (timed out)\n" if w.timed_out else "") + agent(w.agent)


def agent_list(page: vw.AgentList) -> str:
    rows = [f"{i.id}  {_s(i.state):<10} {i.runtime:<8} {_ago(i.created_at):>8}  {i.task_preview[:60]}"
            + ("  [answer NOT VERIFIED]" if i.answer_verified is False else "") for i in page.items]
    return "\n".join(rows + [f"{len(page.items)} of {page.total} agents"])


def answer(a: vw.AnswerView) -> str:
    return f"{a.text}\n-- verified: {a.bytes} bytes, sha256 {a.sha256}"


def transcript_item(item: vw.TranscriptItem) -> str:
    return item.role + (f"[{item.name}]" if item.name else "") + f": {item.content}"


def transcript(page: vw.TranscriptPage) -> str:
    return "\n".join(transcript_item(i) for i in page.items)


def events(page: vw.EventsPage) -> str:
    return "\n".join(f"{e.seq:>6}  {e.kind:<16} {e.execution_id}  {e.data}" for e in page.items)


def agent_message(result: vw.CancelResult | vw.SteerResult) -> str:
    return f"{result.agent_id}: {result.message}"


def batch_list(page: bm.BatchList) -> str:
    rows = [f"{i.id}  {_s(i.workflow):<9} {_s(i.state):<9} {i.runs:>3} runs  {_ago(i.created_at)}" for i in page.items]
    return "\n".join(rows + [f"{len(page.items)} of {page.total} batches"])


def run_action(result: bm.RunActionResult) -> str:
    return f"{result.run.id} ({result.run.title}): {result.message}"


def batch_review(review: bm.BatchReview) -> str:
    parts = []
    for run in review.runs:
        parts.append(f"== {run.title} ({run.branch}) {len(run.commits)} commit(s)")
        parts.append(run.diff or "(no changes to tracked files)")
        parts += [f"?? {u.path}" for u in run.untracked]
    return "\n".join(parts)


def batch_clean(result: bm.BatchCleanResult) -> str:
    rows = [f"{i.action:<12} {i.worktree}  dirty {len(i.dirty_files)}  unmerged {i.unmerged_commits}"
            for i in result.items]
    return "\n".join(rows + [result.message])


def dir_listing(listing: bm.DirListing) -> str:
    return "\n".join([listing.path or "(roots)"] + [f"  {e.name}{'  (git)' if e.is_repository else ''}"
                                                    for e in listing.entries])


RENDERERS: dict[type[BaseModel], Callable[[Any], str]] = {
    vw.AgentView: agent, vw.WaitResult: wait_result, vw.AgentList: agent_list, vw.AnswerView: answer,
    vw.TranscriptPage: transcript, vw.TranscriptItem: transcript_item, vw.EventsPage: events,
    vw.CancelResult: agent_message, vw.SteerResult: agent_message, vw.DocResult: lambda d: d.text,
    bm.BatchView: render_batch, bm.BatchList: batch_list, bm.RunActionResult: run_action,
    bm.BatchReview: batch_review, bm.BatchCleanResult: batch_clean, bm.DirListing: dir_listing,
}


def render(result: BaseModel) -> str:
    """The text of a result model: its renderer, or its JSON when it has none."""
    renderer = RENDERERS.get(type(result))
    return renderer(result) if renderer else result.model_dump_json(indent=1)
