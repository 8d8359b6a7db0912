"""The batch scheduler: lives in the daemon, keeps all its state in SQLite, so a restarted
daemon picks up where the last one stopped (queued runs start, running ones carry on).

It decides under `lock` (database work only) and acts outside it: starting agents, judging
a finished run (git, `verify_command`) run unlocked and commit with compare-and-set on the
run's (state, attempt), so a stop, rerun or cancel that came first wins and nothing waits
behind a slow verify."""

import asyncio
import contextlib
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Literal

from agent_run.batches.budget import batch_caps, spend_group
from agent_run.batches.evidence import agent_sandboxed, evidence_for, run_verify
from agent_run.batches.run_rows import (
    insert_runs,
    make_worktrees,
    unstarted_worktrees,
    write_run_if,
)
from agent_run.batches.workflows import Workflow, workflow_named
from agent_run.config.model import Config
from agent_run.domain.batch_states import RUN_ACTIVE, BatchState, RunState
from agent_run.domain.errors import AnswerIntegrity, DomainError
from agent_run.domain.notices import run_notify
from agent_run.domain.requests import CancelParams, StartParams
from agent_run.domain.states import ExecutionState
from agent_run.services import agent_commands
from agent_run.services import agents as agent_service
from agent_run.services.context import ServiceContext
from agent_run.store import agents as agents_q
from agent_run.store import batches as batches_q
from agent_run.store.db import write
from agent_run.store.usage import batch_spend

SETTINGS_KEY = "settings"  # in a batch's config_json: the daemon config it was created with

TICK_SECONDS = 0.5
IDLE_SECONDS = 5.0


def settled_state(
    workflow: Workflow, cfg: dict[str, Any], runs: list[sqlite3.Row]
) -> tuple[BatchState, str | None]:
    """The batch's state (and reason) that its runs make: blocked when a staged workflow's run
    failed or was stopped, live while a run waits or runs or a next stage is still to be added (a validator,
    reviewers, generated workers), then failed or completed."""
    if not runs:  # its first runs are not made yet
        return BatchState.QUEUED, None
    failed = [r for r in runs if r["state"] == RunState.FAILED]
    if workflow.staged and failed:
        first = failed[0]
        return (
            BatchState.BLOCKED,
            f"{first['title']} failed ({first['failure']}); rerun or resume it to continue",
        )
    stopped = [r for r in runs if r["state"] == RunState.CANCELLED]
    if workflow.staged and stopped:  # its next stage needs every run: no verdict without it
        return (
            BatchState.BLOCKED,
            f"{stopped[0]['title']} was stopped; rerun or resume it to continue",
        )
    if any(RunState(r["state"]) in RUN_ACTIVE for r in runs):
        started = any(r["state"] == RunState.RUNNING or r["attempt"] for r in runs)
        return (BatchState.RUNNING if started else BatchState.QUEUED), None
    if workflow.follow_on_runs(cfg, runs):  # its next stage is due: the next decision adds it
        return BatchState.RUNNING, None
    if failed:
        return BatchState.FAILED, f"{len(failed)} run(s) failed"
    return BatchState.COMPLETED, None


@dataclass(frozen=True)
class Action:
    """Work decided under the lock and done outside it, on a run marked busy meanwhile."""

    kind: Literal["start", "judge"]
    run_id: str
    attempt: int
    start_kind: str = "start"


class BatchScheduler:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.lock = asyncio.Lock()  # one decision about batch state at a time (scheduler or a tool)
        self.wake = asyncio.Event()  # set when a batch is started or a run is redone
        self.busy: set[str] = set()  # runs with an action in flight outside the lock
        self._tasks: set[asyncio.Task[None]] = set()
        self.log: Any = None

    async def run_forever(self, log: Any) -> None:
        self.log = log
        while True:
            revision = self.ctx.watcher.revision
            self.wake.clear()  # before the tick: a wake during the tick is not lost
            live = 1
            try:
                live = await self.tick()
            except Exception as exc:  # keep scheduling; the next tick may succeed
                log.exception("batch.tick_error", error=repr(exc))
            if live:
                await self.ctx.watcher.wait_past(revision, TICK_SECONDS)
            else:  # nothing to schedule: do not keep the revision watcher polling fast
                try:
                    await asyncio.wait_for(self.wake.wait(), IDLE_SECONDS)
                except TimeoutError:
                    pass

    async def tick(self) -> int:
        """Advance every live batch once; return how many there were."""
        batches = await self.ctx.db(batches_q.live_batches)
        for batch in batches:
            try:
                await self.advance(batch["id"])
            except Exception as exc:  # one batch's fault (git cannot add a worktree) stalls it only
                if self.log is not None:
                    self.log.exception("batch.advance_error", batch_id=batch["id"], error=repr(exc))
                with contextlib.suppress(Exception):  # best effort: the log has it already
                    await self.ctx.db(say_stalled, batch["id"], exc)
        return len(batches)

    async def advance(self, batch_id: str) -> None:
        """Decide under the lock, then start agents (awaited) and judge runs (in the background)."""
        async with self.lock:
            marked = set(self.busy)
            try:
                actions = await self._decide(batch_id)
            except BaseException:  # its actions are lost: their runs must not stay marked busy
                self.busy.intersection_update(marked)
                raise
        for action in actions:
            if action.kind == "start":
                await self.act(action)
            else:
                task = asyncio.create_task(self.act(action))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _decide(self, batch_id: str) -> list[Action]:
        batch = await self.ctx.db(batches_q.get_batch, batch_id)
        if batch is None or BatchState(batch["state"]).ended:
            return []
        workflow, cfg = workflow_named(batch["workflow"]), json.loads(batch["config_json"])
        actions: list[Action] = []
        for run in await self.ctx.db(batches_q.runs, batch_id):
            if run["state"] == RunState.RUNNING and run["id"] not in self.busy:
                if run["agent_id"] is not None or not batch["cancel_requested"]:
                    actions += await self._sync_run(run, workflow)
        runs = await self.ctx.db(batches_q.runs, batch_id)
        if batch["cancel_requested"]:
            await self._cancel(batch, runs)
            return actions
        # No runs at all: a batch an older agent-run admitted before making its first runs.
        specs = workflow.follow_on_runs(cfg, runs) if runs else workflow.initial_runs(cfg)
        if specs:
            await self.ctx.db(insert_runs, batch, specs, runs)
            runs = await self.ctx.db(batches_q.runs, batch_id)
        # Rows come before their worktrees: those a kill (or a git failure) left unmade are made
        # now, before any run of them starts; a failure says why and is retried next tick.
        if unstarted_worktrees(runs):
            await asyncio.to_thread(make_worktrees, batch, runs)
        running = sum(r["state"] == RunState.RUNNING for r in runs)
        for run in runs:
            if running >= cfg["concurrency"]:
                break
            if (
                run["state"] == RunState.QUEUED
                and run["id"] not in self.busy
                and workflow.ready(run, runs)
            ):
                started = await self.begin_attempt(run, kind="start")
                actions += started
                running += len(started)  # a run failed at the batch's cap does not run
        await self._settle_batch(batch, workflow)
        return actions

    # -- decisions (under the lock) ----------------------------------------------------------

    async def begin_attempt(self, run: sqlite3.Row, *, kind: str) -> list[Action]:
        """Commit the run's next attempt number (compare-and-set) with its caps (what is left of
        the batch's) and mark it busy; the agent is started by the returned action. Its
        request_id derives from the attempt and its caps are committed with it, so a daemon that
        dies in between starts no second agent: the same request returns the same one. A batch
        at its cap fails the attempt at once, saying why: it starts no new run."""

        def begin(conn: sqlite3.Connection) -> int | None:
            with write(conn):
                batch = batches_q.get_batch(conn, run["batch_id"])
                at_cap, caps = batch_caps(
                    json.loads(batch["config_json"]), *batch_spend(conn, batch["id"])
                )
                attempt = batches_q.begin_attempt(
                    conn,
                    run,
                    agent_id=None,
                    attempt_max_tokens=caps.get("max_tokens"),
                    attempt_max_cost_usd=caps.get("max_cost_usd"),
                )
                if attempt is None:
                    return None
                batches_q.move_batch(
                    conn, run["batch_id"], expect=BatchState.QUEUED, to=BatchState.RUNNING
                )
                if at_cap is not None:
                    batches_q.update_run_if(
                        conn,
                        batches_q.get_run(conn, run["id"]),
                        expect_state=RunState.RUNNING,
                        expect_attempt=attempt,
                        state=RunState.FAILED,
                        failure=at_cap,
                    )
                    return None
                return attempt

        attempt = await self.ctx.db(begin)
        if attempt is None:
            return []
        self.busy.add(run["id"])
        return [Action("start", run["id"], attempt, kind)]

    async def _sync_run(self, run: sqlite3.Row, workflow: Workflow) -> list[Action]:
        if run["agent_id"] is None:  # the daemon died between committing the attempt and the agent
            self.busy.add(run["id"])
            return [Action("start", run["id"], run["attempt"], "rerun")]
        latest = await self.ctx.db(agents_q.latest_execution, run["agent_id"])
        state = ExecutionState(latest["state"])
        if not state.terminal:
            return []
        if state is ExecutionState.CANCELLED:
            await self.ctx.db(
                write_run_if,
                run["id"],
                RunState.RUNNING,
                run["attempt"],
                state=RunState.CANCELLED,
                failure="stopped",
            )
            return []
        if state is not ExecutionState.SUCCEEDED:
            failure = f"{latest['failure_kind']}: {(latest['failure_message'] or '')[:300]}"
            return await self._fail_run(run, workflow, failure)
        self.busy.add(run["id"])
        return [Action("judge", run["id"], run["attempt"])]

    async def _fail_run(self, run: sqlite3.Row, workflow: Workflow, failure: str) -> list[Action]:
        if not await self.ctx.db(
            write_run_if,
            run["id"],
            RunState.RUNNING,
            run["attempt"],
            state=RunState.FAILED,
            failure=failure,
        ):
            return []
        if run["attempt"] <= workflow.retries(run["stage"]):  # the workflow's retry policy
            fresh = await self.ctx.db(batches_q.get_run, run["id"])
            return await self.begin_attempt(fresh, kind="rerun")
        return []

    # -- actions (outside the lock) ----------------------------------------------------------

    async def act(self, action: Action) -> None:
        try:
            if action.kind == "start":
                await self._start_agent(action)
            else:
                follow = await self._judge(action)
                for more in follow:
                    await self.act(more)
        except Exception as exc:  # the run stays as it was; the next tick looks again
            if self.log is not None:
                self.log.exception("batch.action_error", run_id=action.run_id, error=repr(exc))
        finally:
            self.busy.discard(action.run_id)
            self.wake.set()

    async def _start_agent(self, action: Action) -> None:
        run = await self.ctx.db(batches_q.get_run, action.run_id)
        batch = await self.ctx.db(batches_q.get_batch, run["batch_id"])
        workflow, cfg = workflow_named(batch["workflow"]), json.loads(batch["config_json"])
        runs = await self.ctx.db(batches_q.runs, batch["id"])
        # the caps are what was left of the batch's when the attempt began (begin_attempt)
        caps = {
            "max_tokens": run["attempt_max_tokens"],
            "max_cost_usd": run["attempt_max_cost_usd"],
        }
        params = _start_params(run, action.attempt, workflow.read_roots(run, runs), cfg, caps)
        settings = Config.model_validate(cfg[SETTINGS_KEY]) if SETTINGS_KEY in cfg else None
        try:
            if cfg.get("host") and run["worktree"]:  # a run that owns a worktree: on the host
                from agent_run.services.remote_agents import start_run_on_host

                agent = await start_run_on_host(
                    self.ctx, params, cfg["host"], batch, run, workflow.worker_tools(run["stage"])
                )
            else:
                agent = await agent_service.start(
                    self.ctx,
                    params,
                    worker_tools=workflow.worker_tools(run["stage"]),
                    config=settings,
                    spend_group=spend_group(batch["id"], cfg),
                )
        except DomainError as exc:
            await self.ctx.db(
                write_run_if,
                run["id"],
                RunState.RUNNING,
                action.attempt,
                state=RunState.FAILED,
                failure=f"start: {exc.message}",
            )
            return
        if not await self.ctx.db(_attach_agent, run["id"], action, agent.id):
            # stopped or cancelled while it started: stop the agent too
            await agent_commands.cancel(self.ctx, CancelParams(agent_id=agent.id))

    async def _judge(self, action: Action) -> list[Action]:
        """Judge a run whose agent succeeded (its evidence, then verify_command), and commit the
        verdict only if the run is still at that attempt."""
        run = await self.ctx.db(batches_q.get_run, action.run_id)
        batch = await self.ctx.db(batches_q.get_batch, run["batch_id"])
        workflow, cfg = workflow_named(batch["workflow"]), json.loads(batch["config_json"])
        try:
            evidence = await self.ctx.db(evidence_for, self.ctx.home, batch, run)
        except AnswerIntegrity as exc:  # a tampered answer is never judged
            async with self.lock:
                return await self._fail_run(run, workflow, f"integrity: {exc.message}")
        outcome = workflow.judge(run, evidence, cfg)
        if not outcome.ok:
            async with self.lock:
                return await self._fail_run(
                    run, workflow, outcome.failure or "the workflow judged the run a failure"
                )
        fields: dict[str, Any] = {
            "state": RunState.SUCCEEDED,
            "failure": None,
            "result_json": json.dumps(outcome.result) if outcome.result is not None else None,
        }
        if check := workflow.post_success_check(run, cfg):
            sandbox = await self.ctx.db(agent_sandboxed, run["agent_id"])
            passed, output = await asyncio.to_thread(
                run_verify, check.command, run["workdir"], check.timeout, self.ctx.home, sandbox
            )
            fields.update(verify_passed=int(passed), verify_output=output)
        async with self.lock:  # a verdict lands between decisions, never in the middle of one
            await self.ctx.db(write_run_if, run["id"], RunState.RUNNING, action.attempt, **fields)
        return []

    # -- the batch -------------------------------------------------------------------------

    async def _settle_batch(self, batch: sqlite3.Row, workflow: Workflow) -> None:
        def settle(conn: sqlite3.Connection) -> None:
            with write(conn):
                current = batches_q.get_batch(conn, batch["id"])
                if BatchState(current["state"]).ended:  # cancelled meanwhile
                    return
                runs = batches_q.runs(conn, batch["id"])
                cfg = json.loads(current["config_json"])
                state, reason = settled_state(workflow, cfg, runs)
                at_cap, _ = batch_caps(cfg, *batch_spend(conn, batch["id"]))
                if at_cap is not None and state is not BatchState.COMPLETED:
                    reason = f"{at_cap}; {reason}" if reason else f"{at_cap}: no new run starts"
                if state is BatchState.COMPLETED:
                    for run_id, fields in workflow.rank(runs).items():
                        batches_q.update_run(
                            conn, next(r for r in runs if r["id"] == run_id), **fields
                        )
                if (state, reason) != (current["state"], current["state_reason"]):
                    ended = {"ended_at": time.time()} if state.ended else {}
                    batches_q.move_batch(
                        conn,
                        batch["id"],
                        expect=current["state"],
                        to=state,
                        state_reason=reason,
                        **ended,
                    )

        await self.ctx.db(settle)

    async def _cancel(self, batch: sqlite3.Row, runs: list[sqlite3.Row]) -> None:
        """Stop what runs, drop what waits, keep what finished."""
        still_running = False
        for run in runs:
            if run["state"] == RunState.QUEUED:
                await self.ctx.db(
                    write_run_if,
                    run["id"],
                    RunState.QUEUED,
                    run["attempt"],
                    state=RunState.CANCELLED,
                    failure="batch cancelled",
                )
            elif run["state"] == RunState.RUNNING and run["agent_id"]:
                still_running = True  # synced to cancelled (or its result) on a later tick
                await agent_commands.cancel(self.ctx, CancelParams(agent_id=run["agent_id"]))
            elif (
                run["state"] == RunState.RUNNING
            ):  # no agent yet; one being started is cancelled on attach
                await self.ctx.db(
                    write_run_if,
                    run["id"],
                    RunState.RUNNING,
                    run["attempt"],
                    state=RunState.CANCELLED,
                    failure="batch cancelled",
                )
        if not still_running:

            def done(conn: sqlite3.Connection) -> None:
                with write(conn):
                    current = batches_q.get_batch(conn, batch["id"])
                    batches_q.move_batch(
                        conn,
                        batch["id"],
                        expect=current["state"],
                        to=BatchState.CANCELLED,
                        state_reason="cancelled by the user",
                        ended_at=time.time(),
                    )

            await self.ctx.db(done)


def _start_params(
    run: sqlite3.Row, attempt: int, read_roots: list[str], cfg: dict[str, Any], caps: dict[str, Any]
) -> StartParams:
    """The `start` of a run's attempt: its prompt and folder, the batch's runtime settings."""
    return StartParams(
        task=run["prompt"],
        workdir=run["workdir"],
        runtime=cfg.get("runtime"),
        model=cfg.get("model"),
        account=cfg.get("account"),
        route=cfg.get("route"),
        model_class=cfg.get("model_class"),
        min_remaining=cfg.get("min_remaining"),
        profile=run["profile"],
        request_id=f"{run['id']}-a{attempt}",
        read_roots=read_roots,
        stall_seconds=cfg.get("stall_seconds"),
        wall_seconds=cfg.get("wall_seconds"),
        notify=run_notify(cfg),
        **caps,
    )


def say_stalled(conn: sqlite3.Connection, batch_id: str, exc: Exception) -> None:
    """Show why a batch does not advance; the next tick tries again, and its settling clears
    this once it does."""
    message = exc.message if isinstance(exc, DomainError) else f"{type(exc).__name__}: {exc}"
    with write(conn):
        batches_q.update_batch(
            conn, batch_id, state_reason=f"cannot advance, retrying: {message}"[:500]
        )


def _attach_agent(conn: sqlite3.Connection, run_id: str, action: Action, agent_id: str) -> bool:
    """Record the started agent as the run's attempt, unless the run moved on meanwhile (stopped,
    cancelled, another attempt): False then, and the caller stops the agent."""
    with write(conn):
        fresh = batches_q.get_run(conn, run_id)
        if fresh is None:  # dropped meanwhile (a rerun of the run it judged)
            return False
        if fresh["agent_id"] == agent_id:
            return True
        if fresh["agent_id"] is not None or not batches_q.update_run_if(
            conn,
            fresh,
            expect_state=RunState.RUNNING,
            expect_attempt=action.attempt,
            agent_id=agent_id,
        ):
            return False
        kind = action.start_kind if action.attempt > 1 else "start"
        batches_q.record_attempt(conn, fresh, attempt=action.attempt, kind=kind, agent_id=agent_id)
        return True
