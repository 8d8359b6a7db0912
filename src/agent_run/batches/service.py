"""Batch tool handlers: start (validated before anything is created), views, cancel, per-run
stop / rerun / resume / follow-up. Review and clean-up are `batches/review.py`."""

import asyncio
import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from agent_run.batches.budget import batch_caps
from agent_run.batches.run_rows import (
    insert_rows,
    make_worktrees,
    plan_runs,
    write_run,
    write_run_if,
)
from agent_run.batches.scheduler import SETTINGS_KEY, BatchScheduler, say_stalled
from agent_run.batches.views import batch_summary, batch_view, get_run_or_raise, run_view
from agent_run.batches.workflows import Workflow, workflow_named
from agent_run.domain import batch_models as bm
from agent_run.domain import pages
from agent_run.domain.batch_states import RUN_ACTIVE, BatchState, RunState
from agent_run.domain.errors import (
    BatchNotFound,
    Conflict,
    DomainError,
    InvalidRequest,
    RunLocked,
)
from agent_run.domain.ids import new_id
from agent_run.domain.requests import CancelParams, ResumeParams
from agent_run.domain.run_results import default_title
from agent_run.engines.accounts import choose_account
from agent_run.services import agent_commands
from agent_run.services import agents as agent_service
from agent_run.services.context import ServiceContext
from agent_run.services.notice_send import check_notify
from agent_run.services.routing import check_plain_route, route_candidates
from agent_run.store import batches as batches_q
from agent_run.store import notices as notices_q
from agent_run.store.db import write
from agent_run.store.events import current_revision
from agent_run.store.usage import batch_spend
from agent_run.system import git
from agent_run.system.home import Home


def scheduler(ctx: ServiceContext) -> BatchScheduler:
    """The daemon's one scheduler. Handlers that change a batch call `wake.set()` after their
    commit, so an idle scheduler looks again at once."""
    if ctx.batches is None:
        ctx.batches = BatchScheduler(ctx)
    return ctx.batches


def _locate(p: bm.BatchStartParams, home: Home) -> tuple[git.Project, str, str | None, Path]:
    """(project, pinned base sha, base branch, worktree root): git and the file system, run off
    the event loop. Worktrees never go where the home keeps its own files: each run's sandbox
    would refuse them, so the batch is refused at once, naming the field."""
    project = git.locate_project(p.project)
    base_sha = git.resolve_commit(project.root, p.base_ref)
    branch = git.base_branch(project.root, p.base_ref)
    worktree_root = Path(p.worktree_root).expanduser() if p.worktree_root else project.root.parent
    if not worktree_root.is_absolute() or not worktree_root.is_dir():
        raise InvalidRequest(
            f"worktree_root {worktree_root} is not an existing absolute directory",
            field="worktree_root",
        )
    if home.holds_private(worktree_root):
        raise InvalidRequest(
            f"worktree_root {worktree_root} is inside agent-run's home {home.root}: choose a"
            " folder outside it (with no worktree_root, worktrees go beside the project)",
            field="worktree_root",
        )
    return project, base_sha, branch, worktree_root


async def _check_request(ctx: ServiceContext, p: bm.BatchStartParams) -> None:
    """What a batch's params cannot say alone: its workflow's options, notice target, runtime
    (or route) and account, against the current config."""
    workflow_named(p.workflow).refuse_foreign_options(p.model_fields_set)
    check_notify(p.notify)
    ctx.refresh_config()
    if p.host is not None:  # refused now (unknown, unreachable, another version), not per run
        from agent_run.services.remote_agents import check_host_runtime

        await check_host_runtime(ctx, p)
    if p.route == "auto":  # each run's route is chosen at its own admission
        route_candidates(ctx.config, p)
    else:
        check_plain_route(p)
        runtime_name, runtime, _model = agent_service.resolve_runtime(ctx, p)
        choose_account(runtime, runtime_name, p.account)


def _hashed_config(p: bm.BatchStartParams) -> tuple[dict[str, Any], str]:
    """The batch's config and its request hash; a field left unset is left out, so a request
    hashes as it did before that field existed (notify, host, title)."""
    unset = {"request_id"} | ({"notify", "notify_runs"} if p.notify is None else set())
    unset |= {"host"} if p.host is None else set()
    unset |= {"title"} if p.title is None else set()
    config = p.model_dump(exclude=unset)
    return config, hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


async def batch_start(ctx: ServiceContext, p: bm.BatchStartParams) -> bm.BatchView:
    """All or nothing, then resumable: the batch and its first runs (naming their worktrees and
    branches) commit in one transaction; git makes the worktrees after. A kill in between leaves
    rows whose worktrees the caller's retry (same request_id) or the next daemon makes."""
    # Everything that can be wrong is checked before a row, a branch or a folder exists.
    await _check_request(ctx, p)
    project, base_sha, base_branch, worktree_root = await asyncio.to_thread(_locate, p, ctx.home)
    config, request_hash = _hashed_config(p)
    # The batch keeps the settings it was created with: a config reload never changes its runs.
    config[SETTINGS_KEY] = ctx.config.model_dump(mode="json")
    draft = {
        "id": new_id("bt"),
        "request_id": p.request_id,
        "request_hash": request_hash,
        "workflow": p.workflow,
        "title": p.title or default_title(p.prompt),
        "config_json": json.dumps(config),
        "project_root": str(project.root),
        "project_subdir": project.subdir,
        "base_ref": p.base_ref,
        "base_sha": base_sha,
        "base_branch": base_branch,
        "worktree_root": str(worktree_root.resolve()),
    }
    sched = scheduler(ctx)
    async with sched.lock:  # the scheduler waits while the worktrees are made
        specs = workflow_named(p.workflow).initial_runs(config)
        rows = await asyncio.to_thread(plan_runs, draft, specs, [])
        found_id, created = await ctx.db(_admit, draft, p.notify, rows)
        made = await _make_worktrees(ctx, found_id, created)
    if made:
        await sched.advance(found_id)
    sched.wake.set()
    return await ctx.db(batch_view, found_id)


def _admit(
    conn: sqlite3.Connection,
    draft: dict[str, Any],
    notify: Any,
    rows: list[dict[str, Any]],
) -> tuple[str, bool]:
    """The batch, its notice target and its first runs, in one transaction (and True); or the
    batch this request_id already made (the same request: a retry)."""
    with write(conn):
        request_id = draft["request_id"]
        if request_id and (existing := batches_q.get_batch_by_request(conn, request_id)):
            if existing["request_hash"] != draft["request_hash"]:
                raise Conflict(
                    f"request_id {request_id!r} was used for a different batch",
                    field="request_id",
                )
            return str(existing["id"]), False
        batches_q.insert_batch(conn, draft)
        if notify is not None:  # one notice when the batch settles (services/notices.py)
            target = json.dumps(notify.model_dump(mode="json"), sort_keys=True)
            notices_q.insert_target(conn, target, batch_id=draft["id"])
        insert_rows(conn, rows)
        return str(draft["id"]), True


async def _make_worktrees(ctx: ServiceContext, batch_id: str, created: bool) -> bool:
    """Make the worktrees of the batch's runs that have none yet (all of them when it was just
    `created`; those a kill left unmade on a retry); whether they are all there. A new batch
    that git cannot make one for fails, and its runs are cancelled, saying why. A retried one is
    left to the scheduler, which says why and tries again: the git the killed daemon started
    may still be making that very worktree."""
    batch = await ctx.db(batches_q.get_batch, batch_id)
    if BatchState(batch["state"]).ended or batch["cancel_requested"]:
        return True
    runs = await ctx.db(batches_q.runs, batch_id)
    try:
        await asyncio.to_thread(make_worktrees, batch, runs)
    except DomainError as exc:
        if created:
            await ctx.db(_fail_batch, batch_id, f"could not create the worktrees: {exc.message}")
        else:
            await ctx.db(say_stalled, batch_id, exc)
        return False
    return True


def _fail_batch(conn: sqlite3.Connection, batch_id: str, reason: str) -> None:
    with write(conn):
        for run in batches_q.runs(conn, batch_id):
            if run["state"] == RunState.QUEUED:
                batches_q.update_run_if(
                    conn,
                    run,
                    expect_state=RunState.QUEUED,
                    expect_attempt=run["attempt"],
                    state=RunState.CANCELLED,
                    failure=reason,
                )
        current = batches_q.get_batch(conn, batch_id)
        batches_q.move_batch(
            conn, batch_id, expect=current["state"], to=BatchState.FAILED, state_reason=reason
        )


async def batch(ctx: ServiceContext, p: bm.BatchParams) -> bm.BatchView:
    return await ctx.db(batch_view, p.batch_id)


async def list_batches(ctx: ServiceContext, p: bm.ListBatchesParams) -> bm.BatchList:
    if p.cursor is not None and p.offset:
        raise InvalidRequest("give cursor or offset, not both", field="offset")

    def read(conn: sqlite3.Connection) -> bm.BatchList:
        conn.execute("BEGIN")  # the page, its total and its revision from one snapshot
        try:
            revision = current_revision(conn)
            rows, total = batches_q.list_batches(
                conn,
                limit=p.limit + 1,
                offset=p.offset,
                after=pages.after(p.cursor),
                project=p.project,
                states=p.state,
                q=p.q,
                include_archived=p.include_archived,
            )
            counts = batches_q.run_counts(conn, [r["id"] for r in rows[: p.limit]])
        finally:
            conn.execute("COMMIT")
        last = rows[p.limit - 1] if len(rows) > p.limit else None
        return bm.BatchList(
            items=[batch_summary(r, counts[r["id"]]) for r in rows[: p.limit]],
            total=total,
            limit=p.limit,
            offset=p.offset,
            next_cursor=pages.cursor_of(last["created_at"], last["id"]) if last else None,
            revision=revision,
        )

    return await ctx.db(read)


async def batch_archive(ctx: ServiceContext, p: bm.BatchArchiveParams) -> bm.BatchView:
    """Set an ended batch aside from list_batches' default view (archived=false: back)."""

    def mark(conn: sqlite3.Connection) -> None:
        with write(conn):
            row = batches_q.get_batch(conn, p.batch_id)
            if row is None:
                raise BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
            if p.archived and not BatchState(row["state"]).ended:
                raise Conflict(
                    f"batch {p.batch_id} is {row['state']}; only a completed, failed or "
                    "cancelled batch is archived",
                    field="batch_id",
                    state=row["state"],
                )
            if (row["archived_at"] is not None) != p.archived:
                batches_q.update_batch(
                    conn, p.batch_id, archived_at=time.time() if p.archived else None
                )
                batches_q.log_batch(conn, p.batch_id, {"archived": p.archived})

    sched = scheduler(ctx)
    async with sched.lock:  # not while a decision reopens it
        await ctx.db(mark)
    return await ctx.db(batch_view, p.batch_id)


async def batch_cancel(ctx: ServiceContext, p: bm.BatchParams) -> bm.BatchView:
    def request(conn: sqlite3.Connection) -> None:
        with write(conn):
            row = batches_q.get_batch(conn, p.batch_id)
            if row is None:
                raise BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
            if not BatchState(row["state"]).ended:
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
    state = BatchState(batch_row["state"])
    if state in (BatchState.COMPLETED, BatchState.FAILED, BatchState.BLOCKED):
        # live again: an archived batch is listed again too
        batches_q.move_batch(
            conn,
            batch_id,
            expect=state,
            to=BatchState.RUNNING,
            state_reason=None,
            ended_at=None,
            archived_at=None,
        )


async def run_stop(ctx: ServiceContext, p: bm.RunParams) -> bm.RunActionResult:
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, p.run_id)
        if run["state"] == RunState.QUEUED:
            await ctx.db(
                write_run_if,
                run["id"],
                RunState.QUEUED,
                run["attempt"],
                state=RunState.CANCELLED,
                failure="stopped",
            )
            message = "stopped before it started"
        elif run["state"] == RunState.RUNNING and run["agent_id"]:
            await agent_commands.cancel(ctx, CancelParams(agent_id=run["agent_id"]))
            message = "cancel sent to its agent"
        elif (
            run["state"] == RunState.RUNNING
        ):  # its agent is being started: it is cancelled on attach
            await ctx.db(
                write_run_if,
                run["id"],
                RunState.RUNNING,
                run["attempt"],
                state=RunState.CANCELLED,
                failure="stopped",
            )
            message = "stopped while its agent was starting"
        elif workflow_named(batch_row["workflow"]).stop_sets_aside(run):
            message = await _set_aside(ctx, sched, batch_row, run)
        else:
            message = f"run is {run['state']}; nothing to stop"
    sched.wake.set()
    return await _result(ctx, p.run_id, message)


async def _set_aside(
    ctx: ServiceContext, sched: BatchScheduler, batch_row: sqlite3.Row, run: sqlite3.Row
) -> str:
    """Stop a failed run that blocks a staged batch: it is set aside (cancelled), the batch is
    live again and its next stage goes on with the runs that remain (the Agents Runner rule).
    Under the scheduler's lock; a run being changed elsewhere is refused."""
    _batch_open(batch_row, "be stopped")
    if run["id"] in sched.busy:
        raise Conflict(
            f"run {run['id']} is being changed by another request; try again",
            field="run_id",
            state=run["state"],
        )

    def set_aside(conn: sqlite3.Connection) -> bool:
        with write(conn):
            fresh = batches_q.get_run(conn, run["id"])
            if not batches_q.update_run_if(
                conn,
                fresh,
                expect_state=RunState.FAILED,
                expect_attempt=run["attempt"],
                state=RunState.CANCELLED,
                failure=f"stopped after it failed: {run['failure']}"[:1000],
            ):
                return False
            _reopen_batch(conn, batch_row["id"])
            return True

    if not await ctx.db(set_aside):
        raise Conflict(f"run {run['id']} changed meanwhile; look again", field="run_id")
    return "stopped: set aside, the batch goes on with the runs that remain"


def _cancelled(batch_row: sqlite3.Row) -> bool:
    """Cancelled, or being cancelled: final either way."""
    return batch_row["state"] == BatchState.CANCELLED or bool(batch_row["cancel_requested"])


def _batch_open(batch_row: sqlite3.Row, verb: str) -> None:
    """A cancelled batch (or one being cancelled) is final: none of its runs is redone, or the
    scheduler, which no longer looks at it, would never judge or stop the new attempt."""
    if _cancelled(batch_row):
        raise Conflict(
            f"batch {batch_row['id']} is cancelled; its runs cannot {verb} "
            "(start a new batch from it: batch_start with the same fields)",
            field="run_id",
            state=batch_row["state"],
        )


def _redo_allowed(workflow: Workflow, run: sqlite3.Row, runs: list[sqlite3.Row], verb: str) -> None:
    if reason := workflow.redo_refusal(run, runs):
        raise Conflict(
            f"run {run['id']} cannot {verb}: {reason}", field="run_id", state=run["state"]
        )


def _settled(
    sched: BatchScheduler, run: sqlite3.Row, verb: str, needs_worktree: bool = True
) -> None:
    if RunState(run["state"]) in RUN_ACTIVE:
        raise Conflict(
            f"run {run['id']} is {run['state']}; stop it or wait before you {verb} it",
            field="run_id",
            state=run["state"],
        )
    if run["id"] in sched.busy:
        raise Conflict(
            f"run {run['id']} is being changed by another request; try again",
            field="run_id",
            state=run["state"],
        )
    if needs_worktree and run["worktree"] and not Path(run["worktree"]).is_dir():
        raise Conflict(
            f"run {run['id']}'s worktree {run['worktree']} no longer exists, so it cannot {verb}",
            field="run_id",
            state=run["state"],
        )


async def run_rerun(ctx: ServiceContext, p: bm.RunParams) -> bm.RunActionResult:
    sched = scheduler(ctx)
    async with sched.lock:  # decide and commit the new attempt; its agent starts outside the lock
        batch_row, run = await _run_context(ctx, p.run_id)
        _batch_open(batch_row, "rerun")
        _settled(sched, run, "rerun")
        workflow = workflow_named(batch_row["workflow"])
        runs = await ctx.db(batches_q.runs, batch_row["id"])
        _redo_allowed(workflow, run, runs, "rerun")
        dropped, _ = workflow.reset_on_rerun(run, runs)
        if live := [
            r["title"]
            for r in runs
            if r["id"] in dropped and (RunState(r["state"]) in RUN_ACTIVE or r["id"] in sched.busy)
        ]:  # a rerun drops the runs that judged this one: never while their agents run
            raise Conflict(
                f"run {run['id']}'s {', '.join(live)} still run; stop them or wait before you "
                "rerun it",
                field="run_id",
                state=run["state"],
            )

        def reset(conn: sqlite3.Connection) -> None:
            with write(conn):
                runs = batches_q.runs(conn, batch_row["id"])
                delete, requeue = workflow.reset_on_rerun(run, runs)
                for run_id in delete:
                    conn.execute("DELETE FROM batch_attempts WHERE run_id = ?", (run_id,))
                    conn.execute("DELETE FROM batch_runs WHERE id = ?", (run_id,))
                for other in runs:
                    if other["id"] in requeue:
                        batches_q.update_run_if(
                            conn,
                            other,
                            expect_state=other["state"],
                            expect_attempt=other["attempt"],
                            state=RunState.QUEUED,
                        )
                conn.execute(
                    "UPDATE batch_runs SET score = NULL, rank = NULL, rank_reason = NULL WHERE batch_id = ?",
                    (batch_row["id"],),
                )
                _reopen_batch(conn, batch_row["id"])

        await ctx.db(reset)
        fresh = await ctx.db(batches_q.get_run, run["id"])
        actions = await sched.begin_attempt(fresh, kind="rerun")
    for action in actions:
        await sched.act(action)
    sched.wake.set()  # the batch may have been settled: make sure the scheduler looks again
    return await _result(
        ctx,
        p.run_id,
        f"attempt {fresh['attempt'] + 1} started in the same worktree; "
        "earlier attempts stay readable",
    )


async def _continue_agent(ctx: ServiceContext, run: sqlite3.Row, prompt: str, kind: str) -> None:
    """Resume the run's agent (a new execution in its native session) as the run's next attempt.
    Called with the run marked busy; the spawn happens outside the scheduler's lock, and the
    attempt is committed only if the run is still where it was (compare-and-set)."""
    await agent_service.resume(ctx, ResumeParams(agent_id=run["agent_id"], prompt=prompt))

    def record(conn: sqlite3.Connection) -> bool:
        with write(conn):
            if _cancelled(batches_q.get_batch(conn, run["batch_id"])):
                return False  # cancelled while the agent resumed
            attempt = batches_q.begin_attempt(conn, run)  # the same agent: agent_id stays
            if attempt is None:
                return False
            batches_q.record_attempt(
                conn, run, attempt=attempt, kind=kind, agent_id=run["agent_id"]
            )
            _reopen_batch(conn, run["batch_id"])
            return True

    if not await ctx.db(record):  # the run moved meanwhile: the new turn must not run unowned
        await agent_commands.cancel(ctx, CancelParams(agent_id=run["agent_id"]))
        raise Conflict(
            f"run {run['id']} changed while its agent was resumed; the new turn was cancelled",
            field="run_id",
        )


async def _continue_run(
    ctx: ServiceContext, run_id: str, check: Any, prompt: str, kind: str
) -> None:
    """Check the run under the lock and mark it busy; resume its agent outside the lock."""
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, run_id)
        verb = kind.replace("followup", "follow up")
        _batch_open(batch_row, verb)
        spent = await ctx.db(batch_spend, batch_row["id"])
        at_cap, _ = batch_caps(json.loads(batch_row["config_json"]), *spent)
        if at_cap is not None:  # a batch at its cap starts no new turn either
            raise Conflict(f"{at_cap}: no run of it resumes or follows up", field="run_id")
        workflow = workflow_named(batch_row["workflow"])
        runs = await ctx.db(batches_q.runs, batch_row["id"])
        _redo_allowed(workflow, run, runs, verb)
        await check(batch_row, run)  # last: a follow-up's check unlocks the run it reopens
        sched.busy.add(run_id)
    try:
        await _continue_agent(ctx, await ctx.db(batches_q.get_run, run_id), prompt, kind)
    finally:
        sched.busy.discard(run_id)
        sched.wake.set()


async def run_resume(ctx: ServiceContext, p: bm.RunResumeParams) -> bm.RunActionResult:
    sched = scheduler(ctx)

    async def check(_batch_row: sqlite3.Row, run: sqlite3.Row) -> None:
        if run["state"] not in (RunState.FAILED, RunState.CANCELLED) or not run["agent_id"]:
            raise Conflict(
                f"run {run['id']} is {run['state']}; only a failed or stopped run resumes",
                field="run_id",
                state=run["state"],
            )
        _settled(sched, run, "resume")

    await _continue_run(ctx, p.run_id, check, p.prompt, "resume")
    return await _result(ctx, p.run_id, "resumed in the agent's own session")


async def run_followup(ctx: ServiceContext, p: bm.RunFollowupParams) -> bm.RunActionResult:
    sched = scheduler(ctx)

    async def check(batch_row: sqlite3.Row, run: sqlite3.Row) -> None:
        _settled(sched, run, "follow up")
        if not run["agent_id"]:
            raise Conflict(f"run {run['id']} never started", field="run_id")
        if run["locked"] and not p.reopen:
            raise RunLocked(
                f"run {run['id']} is locked in a {batch_row['workflow']} batch: its result feeds "
                "the ranking / verdict; pass reopen=true to unlock it",
                field="reopen",
            )
        if p.reopen:
            await ctx.db(write_run, run["id"], locked=0)

    await _continue_run(ctx, p.run_id, check, p.text, "followup")
    return await _result(ctx, p.run_id, "follow-up turn started")
