"""`run_merge`: merge a settled run's branch back into a branch (by default the batch's base
branch), computed without touching any worktree (it needs only the branch) and applied by
compare-and-swap; a conflict moves nothing and offers a follow-up that asks the run's agent to
merge the target into its branch: what its sandbox allows (a rebase moves the worktree's HEAD,
which the sandbox keeps read-only: engines/sandbox_git.py)."""

import asyncio
import sqlite3
from pathlib import Path

from agent_run.batches.run_rows import write_run
from agent_run.batches.service import _run_context, _settled, scheduler
from agent_run.domain import batch_models as bm
from agent_run.domain.errors import InvalidRequest
from agent_run.services.context import ServiceContext
from agent_run.system import git_merge

# Merges in this daemon go one at a time, so a second merge plans against the tip the first one
# left (a merge from outside the daemon meanwhile is still caught by update-ref's compare-and-swap).
_MERGING = asyncio.Lock()


def _target(batch_row: sqlite3.Row, run: sqlite3.Row, p: bm.RunMergeParams) -> str:
    if not run["branch"]:
        raise InvalidRequest(f"run {run['id']} has no branch to merge", field="run_id")
    into = p.into or batch_row["base_branch"]
    if not into:
        raise InvalidRequest(
            f"batch {batch_row['id']} has no base branch (its base_ref {batch_row['base_ref']!r} "
            "is not a branch); name the branch to merge into",
            field="into",
        )
    if into == run["branch"]:
        raise InvalidRequest("a run's branch cannot be merged into itself", field="into")
    return str(into)


def _message(run: sqlite3.Row, p: bm.RunMergeParams, plan: git_merge.MergePlan) -> str:
    if p.message:
        return p.message
    return (
        f"{run['title']}\n\nMerged from run {run['id']} (branch {run['branch']}, "
        f"{plan.ahead} commit(s), {p.strategy}) by agent-run."
    )


def _followup(into: str, conflicts: list[str]) -> str:
    return (
        f"Merge {into} into your branch: run `git merge {into}` in your worktree, resolve the "
        f"conflicts in {', '.join(conflicts)}, `git add` them and finish the merge with "
        "`git commit --no-edit`. Do not rebase: your worktree's HEAD cannot be moved."
    )


def _merge(
    batch_row: sqlite3.Row, run: sqlite3.Row, p: bm.RunMergeParams, planned: list[str]
) -> bm.RunMergeResult:
    """The git side, off the event loop: plan; stop at a conflict, a dry run or nothing to do;
    else commit and swap the ref. The branch tip that was merged is appended to `planned`."""
    root = Path(batch_row["project_root"])
    into = _target(batch_row, run, p)
    git_merge.require_merge_git()
    plan = git_merge.plan_merge(root, into, run["branch"])
    planned.append(plan.head)
    result = bm.RunMergeResult(
        run_id=run["id"],
        merged_into=into,
        strategy=p.strategy,
        dry_run=p.dry_run,
        would_conflict=bool(plan.conflicts),
        conflicts=plan.conflicts,
        ahead=plan.ahead,
        behind=plan.behind,
        message="",
    )
    if plan.conflicts:
        return result.model_copy(
            update={
                "followup_text": _followup(into, plan.conflicts),
                "followup_reopen": bool(run["locked"]),
                "message": f"{len(plan.conflicts)} conflicting path(s); nothing was changed",
            }
        )
    if plan.tree is None and plan.ahead == 0:
        return result.model_copy(update={"message": f"nothing to merge: {into} has it all"})
    if plan.tree is None:  # commits whose changes `into` already has: recorded, no new commit
        return result.model_copy(
            update={
                "already_merged_at": plan.old,
                "message": f"nothing to merge: {into} already has these changes",
            }
        )
    if p.dry_run:
        git_merge.check_worktrees_can_follow(root, plan, plan.tree)
        return result.model_copy(update={"message": f"would merge cleanly into {into}"})
    new = git_merge.make_commit(root, plan, p.strategy, _message(run, p, plan))
    git_merge.apply_merge(root, plan, new)
    return result.model_copy(
        update={"new_sha": new, "message": f"merged into {into} as {new[:12]}"}
    )


async def run_merge(ctx: ServiceContext, p: bm.RunMergeParams) -> bm.RunMergeResult:
    """Check the run is settled and mark it busy (a rerun, follow-up or clean waits); git runs
    outside the scheduler's lock; the merge is recorded on the run."""
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, p.run_id)
        _settled(sched, run, "merge", needs_worktree=False)  # merging reads only its branch
        sched.busy.add(run["id"])
    try:
        planned: list[str] = []
        async with _MERGING:
            result = await asyncio.to_thread(_merge, batch_row, run, p, planned)
        merged_sha = result.new_sha or (None if p.dry_run else result.already_merged_at)
        if merged_sha:
            await ctx.db(
                write_run,
                run["id"],
                merged_sha=merged_sha,
                merged_into=result.merged_into,
                merged_head=planned[0],
            )
    finally:
        sched.busy.discard(run["id"])
    return result
