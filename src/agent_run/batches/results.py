"""A run's result, measured once when it settles and stored on its row (migration 0019), so a
batch view reads it and runs no git: the excerpt of its agent's sealed answer and its change
against the batch's pinned base (`DiffStats`). The scheduler measures a succeeded run while it
judges it (a ranking reads its size) and sweeps every other settled run that is not measured
at its attempt (failed, stopped, cancelled; and any a restarted daemon left)."""

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from agent_run.batches.run_rows import write_run_if
from agent_run.domain.batch_states import RUN_SETTLED
from agent_run.domain.errors import AnswerIntegrity, GitError
from agent_run.domain.run_results import DiffStats, excerpt
from agent_run.services.context import ServiceContext
from agent_run.services.integrity import verified_answer
from agent_run.store import agents as agents_q
from agent_run.store import batches as batches_q
from agent_run.store.db import sql_list
from agent_run.system import git
from agent_run.system.home import Home

SWEEP_LIMIT = 20  # unmeasured runs taken per scheduler pass


def diff_stats(batch: sqlite3.Row, run: sqlite3.Row) -> DiffStats | None:
    """The run's change against the pinned base; None without a worktree (or once removed).
    Git, off the event loop."""
    worktree = Path(run["worktree"]) if run["worktree"] else None
    if worktree is None or not worktree.is_dir():
        return None
    root, base = Path(batch["project_root"]), batch["base_sha"]
    try:
        files = git.numstat(worktree, base)
        head = git.branch_tip(root, run["branch"]) if run["branch"] else None
        commits = git.unmerged_commits(root, run["branch"], base) if head else 0
        uncommitted = len(git.dirty_files(worktree))
    except (GitError, FileNotFoundError, NotADirectoryError):
        if not worktree.is_dir():  # removed under us (batch clean)
            return None
        raise
    return DiffStats(
        files=len(files),
        insertions=sum(f.added for f in files),
        deletions=sum(f.removed for f in files),
        commits=commits,
        uncommitted_files=uncommitted,
        head=head,
    )


def answer_excerpt(conn: sqlite3.Connection, home: Home, agent_id: str | None) -> str | None:
    """The start of the run's agent's sealed answer, re-hashed first (a tampered one gives
    none, and is recorded as such)."""
    latest = agents_q.latest_execution(conn, agent_id) if agent_id else None
    if latest is None or latest["answer_sha256"] is None:
        return None
    try:
        return excerpt(verified_answer(conn, home, latest, "batch results"))
    except (AnswerIntegrity, OSError):
        return None


def result_fields(answer: str | None, stats: DiffStats | None, attempt: int) -> dict[str, Any]:
    """The run row's fields for a measured result."""
    return {
        "answer_excerpt": answer,
        "diff_json": stats.model_dump_json() if stats is not None else None,
        "measured_attempt": attempt,
    }


async def measure(ctx: ServiceContext, run_id: str) -> None:
    """Measure one settled run and store the result, only if it is still at that state and
    attempt (a rerun meanwhile makes it moot: its next settle is measured again)."""
    run = await ctx.db(batches_q.get_run, run_id)
    if run is None:
        return
    batch = await ctx.db(batches_q.get_batch, run["batch_id"])
    answer = await ctx.db(answer_excerpt, ctx.home, run["agent_id"])
    try:
        stats = await asyncio.to_thread(diff_stats, batch, run)
    except GitError:  # kept unmeasured, it would be tried again on every pass
        stats = None
    await ctx.db(
        write_run_if,
        run_id,
        run["state"],
        run["attempt"],
        **result_fields(answer, stats, run["attempt"]),
    )


def unmeasured(conn: sqlite3.Connection, limit: int = SWEEP_LIMIT) -> list[str]:
    """Settled runs not measured at their attempt (the batch_runs_unmeasured index)."""
    return [
        r["id"]
        for r in conn.execute(
            "SELECT id FROM batch_runs WHERE measured_attempt IS NOT attempt"
            f" AND state IN {sql_list(RUN_SETTLED)} LIMIT ?",
            (limit,),
        )
    ]
