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


def diff_line(diff: Any) -> str:
    """`2 files +12 -3, 1 commit, 3 uncommitted`: a run's change against the base."""
    files = (
        f"{diff.files} file{'' if diff.files == 1 else 's'} +{diff.insertions} -{diff.deletions}"
    )
    commits = f"{diff.commits} commit{'' if diff.commits == 1 else 's'}"
    left = f", {diff.uncommitted_files} uncommitted" if diff.uncommitted_files else ""
    return f"{files}, {commits}{left}"


def result_line(run: Any) -> str | None:
    """A settled run's result on one line: diff stats, verify, tokens and cost, how long it
    ran; None for a run that has none yet."""
    parts = []
    diff = getattr(run, "diff", None)
    if diff is not None:
        parts.append(diff_line(diff))
    if run.verify_passed is not None:
        parts.append("verify ok" if run.verify_passed else "verify FAILED")
    usage = getattr(run, "usage", None)
    if usage is not None and usage.executions:
        cost = "" if usage.cost_usd is None else f" ${usage.cost_usd:.4f}"
        parts.append(f"{usage.total_tokens} tokens{cost}")
    took = getattr(run, "duration_seconds", None)
    if took is not None and _s(run.state) != RunState.RUNNING:
        parts.append(f"ran {_duration(took)}")
    return "  ".join(parts) if parts else None


def _doing(run: Any) -> list[str]:
    """A running run's activity: its latest message or tool call, and for how long."""
    activity = getattr(run, "activity", None)
    if activity is None:
        last = getattr(run, "last_message", None)
        return wrapped("last", last) if last else []
    what = f"{_s(activity.kind)} {activity.tool}" if activity.tool else _s(activity.kind)
    return wrapped(f"doing ({what}, {_duration(time.time() - activity.since)} ago)", activity.text)


def run_lines(run: Any, width: int = 12) -> list[str]:
    """One run: its mark, id, title, state, attempt and agent; then its result (answer, diff
    stats, verify, tokens), reviews and why it ranks there, its worktree, what a running run is
    doing, a failed one's whole reason."""
    extra = [f"agent {run.agent_id}"] if run.agent_id else []
    if getattr(run, "account", None):
        extra.append(f"account {run.account}")
    if getattr(run, "route", None):
        extra.append(f"route {run.route}")
    if run.score is not None:
        extra.append(f"score {run.score:g}")
    if run.rank is not None:
        extra.append(f"rank {run.rank}")
    if run.answer_verified is False:
        extra.append("answer NOT VERIFIED")
    state = _s(run.state)
    started = getattr(run, "started_at", None)
    if state == RunState.RUNNING and started is not None:
        extra.append(f"running {_duration(time.time() - started)}")
    head = f"  {_MARK.get(state, '?')} {run.id}  {run.title:<{width}} {state:<9} a{run.attempt}"
    lines = ["  ".join([head, *extra])]
    if (result := result_line(run)) is not None:
        lines.append(f"      result {result}")
    if excerpt := getattr(run, "answer_excerpt", None):
        lines += wrapped("answer", excerpt)
    for review in getattr(run, "reviews", None) or []:
        score = "-" if review.score is None else f"{review.score:g}"
        who = (
            review.title
            if _s(review.state) == RunState.SUCCEEDED
            else f"{review.title}, {review.state}"
        )
        lines += wrapped(f"review {score}", f"{review.reason or ''} ({who})")
    if reason := getattr(run, "rank_reason", None):
        lines += wrapped("why", reason)
    if run.worktree:
        lines.append(f"      worktree {run.worktree}")
    merged = getattr(run, "merged_sha", None)
    if merged:
        lines.append(f"      merged into {run.merged_into} as {merged[:12]}")
    if state == RunState.RUNNING:
        lines += _doing(run)
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


def first_line(text: str | None) -> str:
    """A prompt's first line that says something, trimmed to WIDTH."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def render_batch(b: Any) -> str:
    """A `BatchView`: its title and prompt's first line, state, project and base, each run with
    its result, a validated batch's verdict, a ranked one's rule and the legend of the marks."""
    config = _plain(b.config)
    title, prompt = getattr(b, "title", None), first_line(config.get("prompt"))
    lines = [title] if title else []
    lines += [
        f"{b.id}  {_s(b.workflow)}  {_s(b.state)}"
        + (f"  ({b.state_reason})" if b.state_reason else ""),
        *([f"  prompt  {prompt}"] if prompt != title else []),
        f"  project {b.project_root}{'/' + b.project_subdir if b.project_subdir else ''}"
        f"  base {b.base_ref} @ {b.base_sha[:12]}",
    ]
    usage = getattr(b, "usage", None)
    if usage is not None:
        lines.append(f"  usage {usage_line(usage)}")
    width = max((len(run.title) for run in b.runs), default=0)
    for run in b.runs:
        lines += run_lines(run, width)
    rule = getattr(b, "ranking_rule", None)
    ranking = textwrap.wrap(f"ranking: {rule}", WIDTH, subsequent_indent="  ") if rule else []
    return "\n".join(lines + render_verdict(b) + ranking + [LEGEND])


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
    if not seen:  # the header: the title, the id and state, the prompt, through the project line
        drawn = render_batch(b).splitlines()
        end = next((i for i, line in enumerate(drawn) if line.startswith("  project ")), 1)
        lines += [*drawn[: end + 1], LEGEND]
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
