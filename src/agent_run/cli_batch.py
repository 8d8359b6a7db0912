"""`agent-run batch show --follow`: live progress of a batch in a terminal, and its text form."""

import sys
import time
from typing import Any

from agent_run.domain.batch_states import BATCH_ENDED, BatchState, RunState

SETTLED = (*BATCH_ENDED, BatchState.BLOCKED)  # where `--follow` stops watching
_MARK = {RunState.QUEUED: ".", RunState.RUNNING: ">", RunState.SUCCEEDED: "+", RunState.FAILED: "x",
         RunState.CANCELLED: "-"}


def render_batch(b: dict[str, Any]) -> str:
    lines = [f"{b['id']}  {b['workflow']}  {b['state']}" + (f"  ({b['state_reason']})" if b["state_reason"] else ""),
             f"  project {b['project_root']}{'/' + b['project_subdir'] if b['project_subdir'] else ''}"
             f"  base {b['base_ref']} @ {b['base_sha'][:12]}"]
    for run in b["runs"]:
        extra = []
        if run["score"] is not None:
            extra.append(f"score {run['score']:g}")
        if run["rank"] is not None:
            extra.append(f"rank {run['rank']}")
        if run["verify_passed"] is not None:
            extra.append("verify ok" if run["verify_passed"] else "verify FAILED")
        if run.get("answer_verified") is False:
            extra.append("answer NOT VERIFIED")
        if run["failure"]:
            extra.append(run["failure"][:60])
        lines.append(f"  {_MARK.get(run['state'], '?')} {run['id']}  {run['title']:<26} {run['state']:<9}"
                     f" a{run['attempt']}  {'  '.join(extra)}")
    return "\n".join(lines)


def render_ranking(b: dict[str, Any]) -> str:
    ranked = sorted((r for r in b["runs"] if r["rank"] is not None), key=lambda r: r["rank"])
    lines = ["ranking:"]
    for run in ranked:
        verify = "" if run["verify_passed"] is None else ("  verify ok" if run["verify_passed"] else "  verify FAILED")
        lines.append(f"  #{run['rank']}  {run['title']:<14} score {run['score']:>5g}  {run['branch']}{verify}")
    return "\n".join(lines)


def watch_batch(session: Any, batch_id: str) -> dict[str, Any]:
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
        if b["state"] in SETTLED:
            return b
        session.call("list_agents", {"after_revision": b["revision"], "wait_seconds": 2, "limit": 1})
        time.sleep(0.1)  # coalesce bursts of changes into one redraw


def follow_batch(session: Any, batch_id: str) -> int:
    """`batch show --follow`: exit 0 completed, 2 failed or blocked, 3 cancelled."""
    b = watch_batch(session, batch_id)
    if b["workflow"] == "ranked" and b["state"] == BatchState.COMPLETED:
        print(render_ranking(b))
    return {BatchState.COMPLETED: 0, BatchState.CANCELLED: 3}.get(b["state"], 2)
