"""Human-readable rendering of tool results (`--format text`, MCP's text content): one render
function per result model, looked up in `RENDERERS` by the model's class name; a result without
one prints as JSON.

A renderer reads the result's fields as attributes, so it takes the pydantic model (MCP, the
CLI's waits and follows) or a `Record` of the daemon's JSON with that model's name (a plain CLI
verb, which must start without importing pydantic; see `cli.spec`).
"""

import json
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent_run.domain.batch_states import RunState
from agent_run.text.accounts import RENDERERS as ACCOUNT_RENDERERS
from agent_run.text.batch import render_batch, wrapped
from agent_run.text.capacity import RENDERERS as CAPACITY_RENDERERS
from agent_run.text.hosts import RENDERERS as HOST_RENDERERS

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
    if _get(ex, "route"):
        lines.append(f"  route   {ex.route} ({ex.route_reason})")
    if _get(a, "sandbox") == "none":
        lines.append('  sandbox none: the engine runs unsandboxed (runtime `sandbox = "none"`)')
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
        + ("  [sandbox: none]" if _get(i, "sandbox") == "none" else "")
        for i in page.items
    ]
    return "\n".join(rows + [f"{len(page.items)} of {page.total} agents"])


def answer(a: "vw.AnswerView") -> str:
    return f"{a.text}\n-- verified: {a.bytes} bytes, sha256 {a.sha256}"


def transcript_item(item: "vw.TranscriptItem") -> str:
    return item.role + (f"[{item.name}]" if item.name else "") + f": {item.content}"


def turn_prompt(turn: "vw.TurnPrompt") -> str:
    return f"── turn {turn.number} · {turn.kind} ──\n" + "\n".join(
        f"> {line}" for line in turn.prompt.splitlines() or [""]
    )


def transcript(page: "vw.TranscriptPage") -> str:
    """The items, each turn's prompt before its first item (a turn with none yet: at the end)."""
    turns = {t.number: t for t in page.turns}
    lines: list[str] = []
    for item in page.items:
        for number in sorted(n for n in turns if n <= item.execution_number):
            lines.append(turn_prompt(turns.pop(number)))
        lines.append(transcript_item(item))
    lines += [turn_prompt(turns[n]) for n in sorted(turns)]
    return "\n".join(lines)


def events(page: "vw.EventsPage") -> str:
    return "\n".join(
        f"{e.seq:>6}  {e.kind:<16} {e.execution_id}  {_fields(_plain(e.data))}" for e in page.items
    )


def _fields(data: Any) -> str:
    """An event's data as `name=value` pairs (unset ones left out; nested values as JSON)."""
    if not isinstance(data, dict):
        return json.dumps(data, ensure_ascii=False)
    return "  ".join(
        f"{name}={value if isinstance(value, str | int | float) else json.dumps(value)}"
        for name, value in data.items()
        if value is not None
    )


def _plain(value: Any) -> Any:
    return value._data if isinstance(value, Record) else value


def _plain_list(values: list[Any]) -> list[Any]:
    return [_plain(v) for v in values]


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


def run_merge(result: "bm.RunMergeResult") -> str:
    """The verdict, ahead / behind, the conflicting paths and the follow-up that would fix them."""
    lines = [
        f"{result.run_id} -> {result.merged_into} ({result.strategy}"
        f"{', dry run' if result.dry_run else ''}): {result.message}",
        f"  ahead {result.ahead}  behind {result.behind}",
    ]
    lines += [f"  conflict {path}" for path in result.conflicts]
    if result.followup_text:
        reopen = " --reopen" if result.followup_reopen else ""  # a locked run needs it
        lines.append(
            f"  follow up with: agent-run run followup {result.run_id}{reopen} --text "
            f"{shlex.quote(result.followup_text)}"
        )
    return "\n".join(lines)


PREVIEW_LINES = 20  # of each untracked file in `batch review`


def batch_review(review: "bm.BatchReview") -> str:
    """Each run's commits, diff and untracked files, each file with its first lines."""
    parts = []
    for run in review.runs:
        parts.append(f"== {run.title} ({run.branch}) {len(run.commits)} commit(s)")
        parts += [f"   {commit}" for commit in run.commits]
        parts.append(run.diff or "(no changes to tracked files)")
        if run.diff_truncated:
            parts.append("(diff truncated)")
        for u in run.untracked:
            lines = u.preview.splitlines()
            parts.append(f"?? {u.path} (untracked)")
            parts += [f"   | {line}" for line in lines[:PREVIEW_LINES]]
            if len(lines) > PREVIEW_LINES:
                parts.append(f"   | ... {len(lines) - PREVIEW_LINES} more line(s)")
    return "\n".join(parts or ["no runs with a worktree"])


def batch_clean(result: "bm.BatchCleanResult") -> str:
    """The plan or what was removed, then what to do next: the service's message, which names
    params as `confirm=true` (MCP's words) and which the CLI shows in its flags (`--confirm`)."""
    rows = [
        f"{i.action:<12} {i.worktree or i.branch}  dirty {len(i.dirty_files)}  unmerged "
        f"{i.unmerged_commits}"
        for i in result.items
    ]
    return "\n".join(rows + [result.message])


def prune_result(result: Any) -> str:
    """`prune`: each agent with what goes and its bytes, then the total (or that nothing is due)."""
    rows = [
        f"{i.agent_id}  {i.action:<16} {i.bytes:>12,} bytes  {i.rows} row(s)  ended "
        f"{time.strftime('%Y-%m-%d', time.localtime(i.ended_at))}"
        for i in result.agents
    ]
    if not rows:
        return "nothing to prune under [retention]"
    verb = "would free" if result.dry_run else "freed"
    total = (
        f"{len(rows)} agent(s): {verb} {result.bytes_freed:,} bytes, {result.rows_deleted} row(s)"
    )
    return "\n".join(
        rows + [total + ("; run without --dry-run to prune" if result.dry_run else "")]
    )


def run_detail(d: "bm.RunDetail") -> str:
    """`run show`: the run, its batch, agent, folders and attempts, a result or failure."""
    run = d.run
    lines = [
        f"{run.id}  {run.title}  {_s(run.state)}  ({_s(run.stage)} of {_s(d.workflow)} batch "
        f"{d.batch_id}, {_s(d.batch_state)})",
        f"  agent    {run.agent_id or '- (not started)'}"
        + (f" ({run.agent_state})" if run.agent_state else ""),
        f"  worktree {run.worktree or '- (none: reads the project)'}"
        + (f"  branch {run.branch}" if run.branch else ""),
    ]
    lines += [f"  attempt  {a.attempt} {a.kind:<8} agent {a.agent_id}" for a in run.attempts]
    if run.score is not None or run.rank is not None:
        lines.append(f"  score    {run.score}  rank {run.rank}")
    if run.result is not None:
        shown = json.dumps(_plain(run.result), ensure_ascii=False)
        lines.append(f"  result   {shown[:300]}{'...' if len(shown) > 300 else ''}")
    if _get(run, "last_message") and _s(run.state) == RunState.RUNNING:
        lines += wrapped("last", run.last_message, 2)
    if run.failure:
        lines += wrapped("failure", run.failure, 2)
    if _s(run.state) == RunState.SUCCEEDED:
        lines.append(f"  answer:  agent-run run answer {run.id}")
    return "\n".join(lines)


def changes(c: "vw.ChangesResult") -> str:
    lines = [f"revision {c.revision} (after {c.after_revision})"]
    lines.append("agents:  " + (" ".join(c.agents) or "-"))
    lines.append("batches: " + (" ".join(c.batches) or "-"))
    if c.truncated:
        lines.append("truncated: more changed than --limit; re-read everything")
    return "\n".join(lines)


def project_info(p: "bm.ProjectInfo") -> str:
    if not p.is_repository:
        return f"{p.path}: not in a git repository"
    where = f"{p.repository_root}" + (f" (subdir {p.subdir})" if p.subdir else "")
    head = _get(p, "head")
    return f"{p.path}: repository {where}  branch {p.branch or '(detached)'}" + (
        f"  HEAD {head[:12]}" if head else ""
    )


def doctor_report(r: Any) -> str:
    lines = [f"daemon pid {r.pid}: " + ("every check ok" if r.ok else "a check is BAD")]
    for c in r.checks:
        lines.append(f"{c.level.upper():<4} {c.check:<22} {c.detail}")
        if c.fix:
            lines += [f"{'':<5}| {fix}" for fix in c.fix.splitlines()]
    return "\n".join(lines)


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


def delivery_status(status: "vw.DeliveryStatus") -> str:
    whose = status.agent_id or status.batch_id
    if status.transport is None:
        return f"{whose}: started without notify"
    lines = [f"{whose}: notify by {status.transport}"]
    for n in status.notices:
        line = f"  {n.id}  {n.state:<10} {n.attempts} attempt(s)"
        if n.last_attempt is not None:
            a = n.last_attempt
            line += f"  last: {a.classifier} in {a.duration_seconds:.2f}s"
        if n.last_error:
            line += f"  ({n.last_error})"
        lines.append(line)
    if not status.notices:
        waiting = "the agent has not ended" if status.agent_id else "the batch has not settled"
        lines.append(f"  no notice yet ({waiting})")
    return "\n".join(lines)


RENDERERS: dict[str, Callable[[Any], str]] = {  # result model class name -> renderer
    "AgentView": agent,
    "WaitResult": wait_result,
    "AgentList": agent_list,
    "AnswerView": answer,
    "TranscriptPage": transcript,
    "TranscriptItem": transcript_item,
    "TurnPrompt": turn_prompt,
    "EventsPage": events,
    "CancelResult": agent_message,
    "SteerResult": agent_message,
    "DocResult": lambda d: d.text,
    "BatchView": render_batch,
    "BatchList": batch_list,
    "RunActionResult": run_action,
    "BatchReview": batch_review,
    "RunMergeResult": run_merge,
    "BatchCleanResult": batch_clean,
    "PruneResult": prune_result,
    "DirListing": dir_listing,
    "RunDetail": run_detail,
    "ChangesResult": changes,
    "ProjectInfo": project_info,
    "DoctorReport": doctor_report,
    "Pong": lambda p: f"pong: daemon pid {p.pid}, agent-run {p.version}, home {p.home}",
    "ToolsResult": lambda t: "\n".join(tool["name"] for tool in _plain_list(t.tools)),
    "DaemonStatus": daemon_status,
    "DeliveryStatus": delivery_status,
    "ChannelBatch": lambda b: "\n".join(n.summary for n in b.notices) or "no notice",
    **ACCOUNT_RENDERERS,
    **CAPACITY_RENDERERS,
    **HOST_RENDERERS,
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
