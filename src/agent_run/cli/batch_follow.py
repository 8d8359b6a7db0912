"""`agent-run batch show --follow`: live progress of a batch (redrawn on a terminal, one line
per change elsewhere)."""

import sys
import time
from typing import Any

from agent_run.domain.batch_states import BatchState
from agent_run.text.batch import SETTLED, _s, change_lines, render_batch, render_ranking


def watch_batch(session: Any, batch_id: str) -> Any:
    """Until the batch settles, redraw it in place on a terminal; elsewhere (a pipe, a log)
    print one line per change (`text.batch.change_lines`). Return the settled batch."""
    tty = sys.stdout.isatty()
    drawn, last = 0, None
    seen: dict[str, Any] = {}  # what change_lines printed last
    while True:
        b = session.call("batch", {"batch_id": batch_id})
        text = render_batch(b) if tty else "\n".join(change_lines(b, seen))
        if tty and text != last:
            if drawn:
                sys.stdout.write(f"\x1b[{drawn}F\x1b[J")
            sys.stdout.write(text + "\n")
            drawn, last = text.count("\n") + 1, text
        elif not tty and text:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()
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
