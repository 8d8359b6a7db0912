"""Batch tool handlers: start (validated before anything is created), views, cancel, per-run
stop / rerun / resume / follow-up, review and clean-up."""

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path
from agent_run.batches import git
from agent_run.batches.scheduler import BatchScheduler, insert_runs, write_run
from agent_run.batches.views import batch_summary, batch_view, get_run_or_raise, run_view
from agent_run.batches.workflows import WORKFLOWS
from agent_run.domain import batch_models as bm
from agent_run.domain.errors import BatchNotFound, Conflict, DomainError, InvalidRequest, RunLocked
from agent_run.domain.ids import new_id
from agent_run.domain.requests import CancelParams, ResumeParams
from agent_run.services import agents as agent_service
from agent_run.services.context import ServiceContext
from agent_run.store import batches as batches_q
from agent_run.store.db import write
from agent_run.store.events import current_revision


def scheduler(ctx: ServiceContext) -> BatchScheduler:
    """The daemon's one scheduler. Handlers that change a batch call `wake.set()` after their
    commit, so an idle scheduler looks again at once."""
    if ctx.batches is None:
        ctx.batches = BatchScheduler(ctx)
    return ctx.batches


async def batch_start(ctx: ServiceContext, p: bm.BatchStartParams) -> bm.BatchView:
    # Everything that can be wrong is checked before a row, a branch or a folder exists.
    agent_service.resolve_runtime(ctx, p)
    # git runs off the event loop: a slow repository must not stall every other request.
    project = await asyncio.to_thread(git.locate_project, p.project)
    base_sha = await asyncio.to_thread(git.resolve_commit, project.root, p.base_ref)
    worktree_root = Path(p.worktree_root).expanduser() if p.worktree_root else project.root.parent
    if not worktree_root.is_absolute() or not worktree_root.is_dir():
        raise InvalidRequest(f"worktree_root {worktree_root} is not an existing absolute directory",
                             field="worktree_root")
    config = p.model_dump(exclude={"request_id"})
    request_hash = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    batch_id = new_id("bt")

    def admit(conn: sqlite3.Connection) -> tuple[str, bool]:
        with write(conn):
            if p.request_id and (existing := batches_q.get_batch_by_request(conn, p.request_id)):
                if existing["request_hash"] != request_hash:
                    raise Conflict(f"request_id {p.request_id!r} was used for a different batch",
                                   field="request_id")
                return existing["id"], False
            batches_q.insert_batch(conn, {
                "id": batch_id, "request_id": p.request_id, "request_hash": request_hash,
                "workflow": p.workflow, "config_json": json.dumps(config), "project_root": str(project.root),
                "project_subdir": project.subdir, "base_ref": p.base_ref, "base_sha": base_sha,
                "worktree_root": str(worktree_root.resolve())})
            return batch_id, True

    sched = scheduler(ctx)
    async with sched.lock:
        found_id, created = await ctx.db(admit)
        if created:
            batch = await ctx.db(batches_q.get_batch, found_id)
            try:
                await ctx.db(insert_runs, batch, WORKFLOWS[p.workflow].initial_runs(config), [])
            except DomainError as exc:
                await ctx.db(_fail_batch, found_id, f"could not create the worktrees: {exc.message}")
            await sched.advance(found_id)
    sched.wake.set()
    return await ctx.db(batch_view, found_id)


def _fail_batch(conn: sqlite3.Connection, batch_id: str, reason: str) -> None:
    with write(conn):
        batches_q.update_batch(conn, batch_id, state="failed", state_reason=reason)


async def batch(ctx: ServiceContext, p: bm.BatchParams) -> bm.BatchView:
    return await ctx.db(batch_view, p.batch_id)


async def list_batches(ctx: ServiceContext, p: bm.ListBatchesParams) -> bm.BatchList:
    def read(conn: sqlite3.Connection) -> bm.BatchList:
        revision = current_revision(conn)
        rows, total = batches_q.list_batches(conn, limit=p.limit, offset=p.offset)
        return bm.BatchList(items=[batch_summary(conn, r) for r in rows], total=total, limit=p.limit,
                            offset=p.offset, revision=revision)

    return await ctx.db(read)


async def batch_cancel(ctx: ServiceContext, p: bm.BatchParams) -> bm.BatchView:
    def request(conn: sqlite3.Connection) -> None:
        with write(conn):
            row = batches_q.get_batch(conn, p.batch_id)
            if row is None:
                raise BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
            if row["state"] not in ("completed", "failed", "cancelled"):
                batches_q.update_batch(conn, p.batch_id, cancel_requested=1)

    sched = scheduler(ctx)
    async with sched.lock:
        await ctx.db(request)
        await sched.advance(p.batch_id)
    sched.wake.set()
    return await ctx.db(batch_view, p.batch_id)


# -- runs ------------------------------------------------------------------------------------


async def _run_context(ctx: ServiceContext, run_id: str) -> tuple[sqlite3.Row, sqlite3.Row]:
    run = await ctx.db(get_run_or_raise, run_id)
    batch = await ctx.db(batches_q.get_batch, run["batch_id"])
    return batch, run


async def _result(ctx: ServiceContext, run_id: str, message: str) -> bm.RunActionResult:
    def read(conn: sqlite3.Connection) -> bm.RunView:
        return run_view(conn, batches_q.get_run(conn, run_id))

    return bm.RunActionResult(run=await ctx.db(read), message=message)


def _reopen_batch(conn: sqlite3.Connection, batch_id: str) -> None:
    """A run is being redone: a settled or blocked batch is live again."""
    batch_row = batches_q.get_batch(conn, batch_id)
    if batch_row["state"] in ("completed", "failed", "blocked"):
        batches_q.update_batch(conn, batch_id, state="running", state_reason=None, ended_at=None)


async def run_stop(ctx: ServiceContext, p: bm.RunParams) -> bm.RunActionResult:
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, p.run_id)
        if run["state"] == "queued":
            await ctx.db(write_run, run["id"], state="cancelled", failure="stopped")
            message = "stopped before it started"
        elif run["state"] == "running" and run["agent_id"]:
            await agent_service.cancel(ctx, CancelParams(agent_id=run["agent_id"]))
            message = "cancel sent to its agent"
        else:
            message = f"run is {run['state']}; nothing to stop"
    sched.wake.set()
    return await _result(ctx, p.run_id, message)


def _settled(run: sqlite3.Row, verb: str) -> None:
    if run["state"] in ("queued", "running"):
        raise Conflict(f"run {run['id']} is {run['state']}; stop it or wait before you {verb} it",
                       field="run_id", state=run["state"])


async def run_rerun(ctx: ServiceContext, p: bm.RunParams) -> bm.RunActionResult:
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, p.run_id)
        _settled(run, "rerun")
        workflow = WORKFLOWS[batch_row["workflow"]]

        def reset(conn: sqlite3.Connection) -> None:
            with write(conn):
                runs = batches_q.runs(conn, batch_row["id"])
                delete, requeue = workflow.reset_on_rerun(run, runs)
                for run_id in delete:
                    conn.execute("DELETE FROM batch_attempts WHERE run_id = ?", (run_id,))
                    conn.execute("DELETE FROM batch_runs WHERE id = ?", (run_id,))
                for other in runs:
                    if other["id"] in requeue:
                        batches_q.update_run(conn, other, state="queued")
                conn.execute("UPDATE batch_runs SET score = NULL, rank = NULL WHERE batch_id = ?",
                             (batch_row["id"],))
                _reopen_batch(conn, batch_row["id"])

        await ctx.db(reset)
        cfg = json.loads(batch_row["config_json"])
        fresh = await ctx.db(batches_q.get_run, run["id"])
        await sched.start_attempt(await ctx.db(batches_q.get_batch, batch_row["id"]), workflow, cfg,
                                  fresh, kind="rerun")
    sched.wake.set()  # the batch may have been settled: make sure the scheduler looks again
    return await _result(ctx, p.run_id, f"attempt {fresh['attempt'] + 1} started in the same worktree; "
                                        "earlier attempts stay readable")


async def _continue_agent(ctx: ServiceContext, batch_row: sqlite3.Row, run: sqlite3.Row, prompt: str,
                          kind: str) -> None:
    """Resume the run's agent (a new execution in its native session) as the run's next attempt."""
    await agent_service.resume(ctx, ResumeParams(agent_id=run["agent_id"], prompt=prompt))

    def record(conn: sqlite3.Connection) -> None:
        with write(conn):
            fresh = batches_q.get_run(conn, run["id"])
            attempt = fresh["attempt"] + 1
            batches_q.update_run(conn, fresh, state="running", attempt=attempt, failure=None)
            batches_q.record_attempt(conn, fresh, attempt=attempt, kind=kind, agent_id=run["agent_id"])
            _reopen_batch(conn, batch_row["id"])

    await ctx.db(record)


async def run_resume(ctx: ServiceContext, p: bm.RunResumeParams) -> bm.RunActionResult:
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, p.run_id)
        if run["state"] not in ("failed", "cancelled") or not run["agent_id"]:
            raise Conflict(f"run {run['id']} is {run['state']}; only a failed or stopped run resumes",
                           field="run_id", state=run["state"])
        await _continue_agent(ctx, batch_row, run, p.prompt, "resume")
    sched.wake.set()
    return await _result(ctx, p.run_id, "resumed in the agent's own session")


async def run_followup(ctx: ServiceContext, p: bm.RunFollowupParams) -> bm.RunActionResult:
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, p.run_id)
        _settled(run, "follow up")
        if not run["agent_id"]:
            raise Conflict(f"run {run['id']} never started", field="run_id")
        if run["locked"] and not p.reopen:
            raise RunLocked(f"run {run['id']} is locked in a {batch_row['workflow']} batch: its result feeds "
                            "the ranking / verdict; pass reopen=true to unlock it", field="reopen")
        if p.reopen:
            await ctx.db(write_run, run["id"], locked=0)
        await _continue_agent(ctx, batch_row, run, p.text, "followup")
    sched.wake.set()
    return await _result(ctx, p.run_id, "follow-up turn started")


# -- review and clean-up ------------------------------------------------------------------------


async def batch_review(ctx: ServiceContext, p: bm.BatchReviewParams) -> bm.BatchReview:
    batch_row = await ctx.db(batches_q.get_batch, p.batch_id)
    if batch_row is None:
        raise BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
    runs = await ctx.db(batches_q.runs, p.batch_id)
    wanted = [r for r in runs if r["worktree"] and (not p.run_id or r["id"] == p.run_id)]

    def review(run: sqlite3.Row) -> bm.RunReview:
        path = Path(run["worktree"])
        if not path.exists():
            return bm.RunReview(run_id=run["id"], stage=run["stage"], index=run["idx"], title=run["title"],
                                worktree=run["worktree"], branch=run["branch"], commits=[], diff="",
                                diff_truncated=False, untracked=[])
        diff, truncated = git.diff_against(path, batch_row["base_sha"])
        return bm.RunReview(
            run_id=run["id"], stage=run["stage"], index=run["idx"], title=run["title"],
            worktree=run["worktree"], branch=run["branch"],
            commits=git.commits_since(path, batch_row["base_sha"]), diff=diff, diff_truncated=truncated,
            untracked=[bm.UntrackedPreview(path=u.path, preview=u.preview) for u in git.untracked(path)])

    reviews = [await ctx.db(lambda _c, r=run: review(r)) for run in wanted]
    return bm.BatchReview(batch_id=p.batch_id, base_sha=batch_row["base_sha"], runs=reviews)


async def batch_clean(ctx: ServiceContext, p: bm.BatchCleanParams) -> bm.BatchCleanResult:
    batch_row = await ctx.db(batches_q.get_batch, p.batch_id)
    if batch_row is None:
        raise BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
    root = Path(batch_row["project_root"])
    # "Ahead" is measured against where the base ref points now, not the pinned sha.
    into = batch_row["base_ref"] if batch_row["base_ref"] != "HEAD" else batch_row["base_sha"]

    def plan_and_clean(conn: sqlite3.Connection) -> list[bm.CleanItem]:
        items = []
        for run in batches_q.runs(conn, p.batch_id):
            if not run["worktree"] or (p.run_ids and run["id"] not in p.run_ids):
                continue
            path = Path(run["worktree"])
            exists = path.exists()
            dirty = git.dirty_files(path) if exists else []
            ahead = git.unmerged_commits(root, run["branch"], into) if run["branch"] else 0
            if run["state"] in ("queued", "running"):
                action = "kept_running"
            elif not exists and not _branch_exists(root, run["branch"]):
                action = "already_gone"
            elif (dirty or ahead) and not p.force:
                action = "needs_force"
            else:
                action = "remove"
            if p.confirm and action == "remove":
                git.remove_worktree(root, path, run["branch"], force=bool(dirty or ahead) or p.force)
                action = "removed"
            items.append(bm.CleanItem(run_id=run["id"], worktree=run["worktree"], branch=run["branch"],
                                      exists=exists, dirty_files=dirty, unmerged_commits=ahead, action=action))
        return items

    items = await ctx.db(plan_and_clean)
    blocked = sum(i.action == "needs_force" for i in items)
    if p.confirm:
        message = f"removed {sum(i.action == 'removed' for i in items)} worktree(s)"
    else:
        message = f"preview: {sum(i.action == 'remove' for i in items)} to remove; pass confirm=true to remove"
    if blocked:
        message += f"; {blocked} with dirty or unmerged work kept (force=true removes them)"
    return bm.BatchCleanResult(batch_id=p.batch_id, confirmed=p.confirm, items=items, message=message)


def _branch_exists(root: Path, branch: str | None) -> bool:
    return bool(branch) and bool(git.git(root, "branch", "--list", branch).strip())

