"""A batch's text form: its runs, verdict and ranking (`batch show`, `--follow`, the quick start)."""

import textwrap
import time
from typing import Any

from agent_run.domain.batch_states import BATCH_ENDED, BatchState, RunState

SETTLED = (*BATCH_ENDED, BatchState.BLOCKED)  # where `--follow` stops watching
_MARK = {
    RunState.QUEUED: ".",
    RunState.RUNNING: ">",
    RunState.SUCCEEDED: "+",
    RunState.FAILED: "x",
    RunState.CANCELLED: "-",
}


def _s(value: Any) -> str:
    return str(getattr(value, "value", value))


LEGEND = (
    "marks: "
    + "  ".join(f"{mark} {state.value}" for state, mark in _MARK.items())
    + "; aN: attempt N"
)
WIDTH = 100  # where long reasons and messages wrap (at a word, never mid-word)


def _plain(value: Any) -> Any:
    """A `text.render.Record`'s JSON (a plain verb's result), or the value as it is (a model's)."""
    return getattr(value, "_data", value)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def wrapped(label: str, text: str, indent_by: int = 6) -> list[str]:
    """`text` after a label, wrapped at words to WIDTH, every line indented under the run."""
    indent = " " * indent_by
    return textwrap.wrap(
        " ".join(text.split()),
        WIDTH,
        initial_indent=f"{indent}{label} ",
        subsequent_indent=indent + " " * (len(label) + 1),
        break_long_words=False,
        break_on_hyphens=False,
    )


def run_lines(run: Any, width: int = 12) -> list[str]:
    """One run: its mark, id, title, state, attempt and agent; then its worktree, a running
    run's elapsed time and last message, a failed one's whole reason."""
    extra = [f"agent {run.agent_id}"] if run.agent_id else []
    if getattr(run, "account", None):
        extra.append(f"account {run.account}")
    if getattr(run, "route", None):
        extra.append(f"route {run.route}")
    if run.score is not None:
        extra.append(f"score {run.score:g}")
    if run.rank is not None:
        extra.append(f"rank {run.rank}")
    if run.verify_passed is not None:
        extra.append("verify ok" if run.verify_passed else "verify FAILED")
    if run.answer_verified is False:
        extra.append("answer NOT VERIFIED")
    state = _s(run.state)
    started = getattr(run, "started_at", None)
    if state == RunState.RUNNING and started is not None:
        extra.append(f"running {_duration(time.time() - started)}")
    head = f"  {_MARK.get(state, '?')} {run.id}  {run.title:<{width}} {state:<9} a{run.attempt}"
    lines = ["  ".join([head, *extra])]
    if run.worktree:
        lines.append(f"      worktree {run.worktree}")
    merged = getattr(run, "merged_sha", None)
    if merged:
        lines.append(f"      merged into {run.merged_into} as {merged[:12]}")
    last = getattr(run, "last_message", None)
    if state == RunState.RUNNING and last:
        lines += wrapped("last", last)
    if run.failure:
        lines += wrapped("failure", run.failure)
    return lines


def render_verdict(b: Any) -> list[str]:
    """A validated batch's verdict: the winner and each worker's pass and reason."""
    validators = [r for r in b.runs if _s(r.stage) == "validator" and r.result is not None]
    if not validators:
        return []
    verdict = _plain(validators[-1].result)
    winner = verdict.get("winner")
    lines = ["  verdict: " + (f"winner worker {winner}" if winner is not None else "no winner")]
    for w in verdict.get("workers", []):
        head = f"    worker {w.get('worker')}  {'pass' if w.get('pass') else 'FAIL'} "
        lines += textwrap.wrap(
            " ".join(str(w.get("reason", "")).split()),
            WIDTH,
            initial_indent=head,
            subsequent_indent=" " * len(head),
            break_long_words=False,
            break_on_hyphens=False,
        ) or [head.rstrip()]
    return lines


def render_batch(b: Any) -> str:
    """A `BatchView`: its state, project and base, each run, a validated batch's verdict and the
    legend of the state marks."""
    lines = [
        f"{b.id}  {_s(b.workflow)}  {_s(b.state)}"
        + (f"  ({b.state_reason})" if b.state_reason else ""),
        f"  project {b.project_root}{'/' + b.project_subdir if b.project_subdir else ''}"
        f"  base {b.base_ref} @ {b.base_sha[:12]}",
    ]
    usage = getattr(b, "usage", None)
    if usage is not None:
        lines.append(f"  usage {usage_line(usage)}")
    width = max((len(run.title) for run in b.runs), default=0)
    for run in b.runs:
        lines += run_lines(run, width)
    return "\n".join(lines + render_verdict(b) + [LEGEND])


def _run_key(run: Any) -> tuple[Any, ...]:
    """What makes a run's change worth a line (not its elapsed time or last message)."""
    return (
        _s(run.state),
        run.attempt,
        run.agent_id,
        run.score,
        run.rank,
        run.verify_passed,
        run.answer_verified,
        run.failure,
    )


def change_lines(b: Any, seen: dict[str, Any]) -> list[str]:
    """Without a terminal, `--follow` prints what changed since `seen` (updated here), one line
    each: the batch's header the first time, its state when it moves, a run when its state,
    attempt, score, rank or verification moves; a validated batch's verdict once it settles."""
    lines: list[str] = []
    state = (_s(b.state), b.state_reason)
    if not seen:
        lines += [*render_batch(b).splitlines()[:2], LEGEND]
    elif seen.get(b.id) != state:
        reason = f"  ({b.state_reason})" if b.state_reason else ""
        lines.append(f"{b.id}  {_s(b.workflow)}  {_s(b.state)}{reason}")
    seen[b.id] = state
    width = max((len(run.title) for run in b.runs), default=0)
    for run in b.runs:
        key = _run_key(run)
        if seen.get(run.id) != key:
            seen[run.id] = key
            failure = f"  failure: {' '.join(run.failure.split())}" if run.failure else ""
            lines.append(run_lines(run, width)[0] + failure)
    if _s(b.state) in SETTLED and "verdict" not in seen:
        seen["verdict"] = True
        lines += render_verdict(b)
    return lines


def usage_line(usage: Any) -> str:
    """`52 tokens (40 in, 12 out), cost $0.0100`; the cost `unknown` when no engine reported one."""
    cost = "unknown" if usage.cost_usd is None else f"${usage.cost_usd:.4f}"
    return (
        f"{usage.total_tokens} tokens ({usage.input_tokens} in, {usage.output_tokens} out), "
        f"cost {cost}"
    )


def render_ranking(b: Any) -> str:
    ranked = sorted((r for r in b.runs if r.rank is not None), key=lambda r: r.rank)
    lines = ["ranking:"]
    for run in ranked:
        verify = (
            ""
            if run.verify_passed is None
            else ("  verify ok" if run.verify_passed else "  verify FAILED")
        )
        lines.append(f"  #{run.rank}  {run.title:<14} score {run.score:>5g}  {run.branch}{verify}")
    return "\n".join(lines)
