"""`agent-run batch show --follow`: live progress of a batch in a terminal."""

import sys
import time
from typing import Any

from agent_run.domain.batch_states import BatchState
from agent_run.text.batch import SETTLED, _s, render_batch, render_ranking


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
    if _s(b.workflow) == "ranked" and _s(b.state) == BatchState.COMPLETED:
        print(render_ranking(b))
    return exit_codes[_s(b.state)]
