"""`batch_review` and `batch_clean`: each run's changes against the batch's pinned base, and
removing run worktrees (a preview first; dirty or unmerged work only with force), with any
branch named for the batch that no run row points at. Planned under the scheduler's lock, with
the runs being removed marked busy; git runs outside it."""

import asyncio
import sqlite3
from pathlib import Path

from agent_run.batches.service import scheduler
from agent_run.batches.workflows import workflow_named
from agent_run.domain import batch_models as bm
from agent_run.domain.batch_states import RUN_ACTIVE, BatchState, RunState
from agent_run.domain.errors import BatchNotFound, GitError
from agent_run.services.context import ServiceContext
from agent_run.store import batches as batches_q
from agent_run.system import git


async def batch_review(ctx: ServiceContext, p: bm.BatchReviewParams) -> bm.BatchReview:
    sched = scheduler(ctx)
    async with sched.lock:  # a consistent snapshot: which runs exist and which are being cleaned
        batch_row = await ctx.db(batches_q.get_batch, p.batch_id)
        if batch_row is None:
            raise BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
        runs = await ctx.db(batches_q.runs, p.batch_id)
        cleaning = {
            r["id"]
            for r in runs
            if r["id"] in sched.busy and RunState(r["state"]) not in RUN_ACTIVE
        }
    wanted = [r for r in runs if r["worktree"] and (not p.run_id or r["id"] == p.run_id)]
    reviews = [
        await asyncio.to_thread(_review, batch_row, run, run["id"] in cleaning) for run in wanted
    ]
    return bm.BatchReview(batch_id=p.batch_id, base_sha=batch_row["base_sha"], runs=reviews)


def _review(batch_row: sqlite3.Row, run: sqlite3.Row, cleaning: bool) -> bm.RunReview:
    """One run's changes; a worktree removed (or being removed) by `batch clean` shows as empty."""
    path = Path(run["worktree"])
    empty = bm.RunReview(
        run_id=run["id"],
        stage=run["stage"],
        index=run["idx"],
        title=run["title"],
        worktree=run["worktree"],
        branch=run["branch"],
        commits=[],
        diff="",
        diff_truncated=False,
        untracked=[],
    )
    if cleaning or not path.exists():
        return empty
    try:
        diff, truncated = git.diff_against(path, batch_row["base_sha"])
        commits = git.commits_since(path, batch_row["base_sha"])
        untracked = [
            bm.UntrackedPreview(path=u.path, preview=u.preview) for u in git.untracked(path)
        ]
    except (GitError, FileNotFoundError, NotADirectoryError):
        if not path.exists():  # removed under us by a clean that started after our snapshot
            return empty
        raise
    return empty.model_copy(
        update={
            "commits": commits,
            "diff": diff,
            "diff_truncated": truncated,
            "untracked": untracked,
        }
    )


async def batch_clean(ctx: ServiceContext, p: bm.BatchCleanParams) -> bm.BatchCleanResult:
    """Plan under the scheduler's lock and mark the runs to remove busy (a rerun, resume or
    follow-up of them is refused meanwhile); remove outside the lock."""
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row = await ctx.db(batches_q.get_batch, p.batch_id)
        if batch_row is None:
            raise BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
        every = await ctx.db(batches_q.runs, p.batch_id)
        runs = [r for r in every if r["worktree"] and (not p.run_ids or r["id"] in p.run_ids)]
        in_use = _folders_in_use(batch_row, every, sched.busy)
        items = await asyncio.to_thread(_clean_plan, batch_row, runs, sched.busy | in_use, p.force)
        if not p.run_ids:
            items += await asyncio.to_thread(_strays, batch_row, every, p.force)
        removing = {i.run_id for i in items if i.run_id and i.action == "remove" and p.confirm}
        sched.busy.update(removing)
    try:
        items = [
            await asyncio.to_thread(_remove, batch_row, i, p.force)
            if p.confirm and i.action == "remove"
            else i
            for i in items
        ]
    finally:
        sched.busy.difference_update(removing)
    blocked = sum(i.action == "needs_force" for i in items)
    if p.confirm:
        message = f"removed {sum(i.action == 'removed' for i in items)} worktree(s)"
        from agent_run.services.remote_agents import clean_on_host  # runs on a host (if any)

        removed = {i.run_id for i in items if i.action == "removed"}
        message += await clean_on_host(ctx, batch_row, [r for r in runs if r["id"] in removed])
    else:
        removable = sum(i.action == "remove" for i in items)
        message = f"preview: {removable} to remove; run again with confirm=true to remove"
    if blocked:  # params as `name=true`: the CLI shows its flags (`--force`), cli.cli_words
        message += (
            f"; {blocked} with dirty or unmerged work kept (add force=true to remove them too)"
        )
    return bm.BatchCleanResult(
        batch_id=p.batch_id, confirmed=p.confirm, items=items, message=message
    )


def _into(batch_row: sqlite3.Row) -> str:
    """ "Ahead" is measured against where the base ref points now, not the pinned sha."""
    return batch_row["base_ref"] if batch_row["base_ref"] != "HEAD" else batch_row["base_sha"]


def _folders_in_use(batch_row: sqlite3.Row, runs: list[sqlite3.Row], busy: set[str]) -> set[str]:
    """The runs whose worktree a live run works or reads in (a candidate's under review, the
    workers' while the validator reads them): their worktrees are kept as if they ran."""
    workflow = workflow_named(batch_row["workflow"])
    used = [
        Path(folder)
        for r in runs
        if RunState(r["state"]) in RUN_ACTIVE or r["id"] in busy
        for folder in [r["workdir"], *workflow.read_roots(r, runs)]
    ]
    return {
        r["id"]
        for r in runs
        if r["worktree"]
        and any(p == Path(r["worktree"]) or Path(r["worktree"]) in p.parents for p in used)
    }


def _clean_plan(
    batch_row: sqlite3.Row, runs: list[sqlite3.Row], busy: set[str], force: bool
) -> list[bm.CleanItem]:
    root = Path(batch_row["project_root"])
    items = []
    for run in runs:
        path = Path(run["worktree"])
        exists = path.exists()
        dirty = git.dirty_files(path) if exists else []
        ahead = _unmerged(root, batch_row, run) if run["branch"] else 0
        if RunState(run["state"]) in RUN_ACTIVE or run["id"] in busy:
            action = "kept_running"
        elif not exists and not _branch_exists(root, run["branch"]):
            action = "already_gone"
        elif (dirty or ahead) and not force:
            action = "needs_force"
        else:
            action = "remove"
        items.append(
            bm.CleanItem(
                run_id=run["id"],
                worktree=run["worktree"],
                branch=run["branch"],
                exists=exists,
                dirty_files=dirty,
                unmerged_commits=ahead,
                merged_sha=run["merged_sha"],
                action=action,
            )
        )
    return items


def _strays(batch_row: sqlite3.Row, runs: list[sqlite3.Row], force: bool) -> list[bm.CleanItem]:
    """The batch's branches (`agent-run/<batch>/...`) that no run row names, with the worktree
    each is checked out in: what an older agent-run made for an admission a kill cut before its
    rows. A live batch with no runs yet is left alone: its next decision takes them as its runs'."""
    if not runs and not BatchState(batch_row["state"]).ended:
        return []
    root = Path(batch_row["project_root"])
    named = {r["branch"] for r in runs}
    checked_out = git.worktree_branches(root)
    items = []
    for branch in git.branches_under(root, f"agent-run/{batch_row['id']}"):
        if branch in named:
            continue
        path = checked_out.get(branch)
        dirty = git.dirty_files(path) if path is not None else []
        ahead = git.unmerged_commits(root, branch, _into(batch_row))
        items.append(
            bm.CleanItem(
                run_id=None,
                worktree=str(path) if path is not None else None,
                branch=branch,
                exists=path is not None,
                dirty_files=dirty,
                unmerged_commits=ahead,
                action="needs_force" if (dirty or ahead) and not force else "remove",
            )
        )
    return items


def _unmerged(root: Path, batch_row: sqlite3.Row, run: sqlite3.Row) -> int:
    """Commits of the run's branch not in the base ref now; for a run `run_merge` merged (a squash
    leaves its commits off the base), those made after the tip that was merged."""
    if run["merged_head"]:
        return git.unmerged_commits(root, run["branch"], run["merged_head"])
    return git.unmerged_commits(root, run["branch"], _into(batch_row))


def _remove(batch_row: sqlite3.Row, item: bm.CleanItem, force: bool) -> bm.CleanItem:
    git.remove_worktree(
        Path(batch_row["project_root"]),
        Path(item.worktree) if item.worktree else None,
        item.branch,
        force=bool(item.dirty_files or item.unmerged_commits) or force,
        merged=item.merged_sha is not None,
    )
    return item.model_copy(update={"action": "removed"})


def _branch_exists(root: Path, branch: str | None) -> bool:
    return bool(branch) and bool(git.git(root, "branch", "--list", branch).strip())
