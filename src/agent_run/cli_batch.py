"""`agent-run batch show --follow`: live progress of a batch in a terminal, and its text form."""

import sys
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


def _run_line(run: Any) -> str:
    extra = []
    if run.score is not None:
        extra.append(f"score {run.score:g}")
    if run.rank is not None:
        extra.append(f"rank {run.rank}")
    if run.verify_passed is not None:
        extra.append("verify ok" if run.verify_passed else "verify FAILED")
    if run.answer_verified is False:
        extra.append("answer NOT VERIFIED")
    if run.failure:
        extra.append(run.failure[:60])
    state = _s(run.state)
    return f"  {_MARK.get(state, '?')} {run.id}  {run.title:<26} {state:<9} a{run.attempt}  {'  '.join(extra)}"


def render_batch(b: Any) -> str:
    """A `BatchView`: its state, project and base, one line per run."""
    lines = [
        f"{b.id}  {_s(b.workflow)}  {_s(b.state)}"
        + (f"  ({b.state_reason})" if b.state_reason else ""),
        f"  project {b.project_root}{'/' + b.project_subdir if b.project_subdir else ''}"
        f"  base {b.base_ref} @ {b.base_sha[:12]}",
    ]
    return "\n".join(lines + [_run_line(run) for run in b.runs])


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


def watch_batch(session: Any, batch_id: str) -> Any:
    """Redraw the batch on every change (in place on a terminal) until it settles; return it."""
    tty = sys.stdout.isatty()
    drawn, last = 0, None
    while True:
        b = session.call("batch", {"batch_id": batch_id})
        text = render_batch(b)
        if text != last:
            if tty and drawn:
                sys.stdout.write(f"\x1b[{drawn}F\x1b[J")
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            drawn, last = text.count("\n") + 1, text
        if _s(b.state) in SETTLED:
            return b
        session.call("changes", {"after_revision": b.revision, "wait_seconds": 2, "limit": 1})
        time.sleep(0.1)  # coalesce bursts of changes into one redraw


def follow_batch(session: Any, batch_id: str, exit_codes: dict[str, int]) -> int:
    """`batch show --follow`: the exit status of the state it settled in (the tool's exit codes)."""
    b = watch_batch(session, batch_id)
    if _s(b.workflow) == "ranked" and _s(b.state) == "completed":
        print(render_ranking(b))
    return exit_codes[_s(b.state)]
