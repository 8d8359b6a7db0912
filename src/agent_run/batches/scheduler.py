"""The batch scheduler: lives in the daemon, keeps all its state in SQLite, so a restarted
daemon picks up where the last one stopped (queued runs start, running ones carry on).

It decides under `lock` (database work only) and acts outside it: starting agents, judging
a finished run (git, `verify_command`) run unlocked and commit with compare-and-set on the
run's (state, attempt), so a stop, rerun or cancel that came first wins and nothing waits
behind a slow verify."""

import asyncio
import json
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent_run import git
from agent_run.batches.budget import batch_caps
from agent_run.batches.workflows import Evidence, RunSpec, Workflow, check_stage, workflow_named
from agent_run.config import Config
from agent_run.domain.batch_states import RUN_ACTIVE, BatchState, RunState
from agent_run.domain.errors import AnswerIntegrity, DomainError
from agent_run.domain.ids import new_id
from agent_run.domain.requests import CancelParams, StartParams
from agent_run.domain.states import ExecutionState
from agent_run.engines.environment import command_environment
from agent_run.services import agents as agent_service
from agent_run.services.context import ServiceContext
from agent_run.services.integrity import verified_answer
from agent_run.store import agents as agents_q
from agent_run.store import batches as batches_q
from agent_run.store import reports as reports_q
from agent_run.store.db import write
from agent_run.store.usage import batch_spend

SETTINGS_KEY = "settings"  # in a batch's config_json: the daemon config it was created with

TICK_SECONDS = 0.5
IDLE_SECONDS = 5.0
VERIFY_OUTPUT_BYTES = 20_000


def new_run_row(batch: sqlite3.Row, spec: RunSpec, runs: list[sqlite3.Row]) -> dict[str, Any]:
    """A run row for `spec`: its own worktree on a new branch at the pinned base, or the folder
    it works in (the project for generators and validators, its candidate's for reviewers)."""
    root, subdir = Path(batch["project_root"]), batch["project_subdir"]
    row: dict[str, Any] = {
        "id": new_id("rn"),
        "batch_id": batch["id"],
        "stage": spec.stage,
        "idx": spec.idx,
        "title": spec.title,
        "prompt": spec.prompt,
        "profile": spec.profile,
        "parent_run_id": spec.parent_run_id,
    }
    if spec.worktree:
        project = git.Project(root, subdir)
        label = git.ref_label(root, batch["base_ref"], batch["base_sha"])
        path = git.worktree_path(
            Path(batch["worktree_root"]), project, label, batch["id"], spec.idx
        )
        branch = f"agent-run/{batch['id']}/{spec.stage}-{spec.idx}"
        git.add_worktree(root, path, branch, batch["base_sha"])
        row.update(
            worktree=str(path), branch=branch, workdir=str(path / subdir) if subdir else str(path)
        )
    elif spec.parent_run_id:
        parent = next(r for r in runs if r["id"] == spec.parent_run_id)
        row.update(workdir=parent["workdir"])
    else:
        row.update(workdir=str(root / subdir) if subdir else str(root))
    return row


def insert_runs(
    conn: sqlite3.Connection, batch: sqlite3.Row, specs: list[RunSpec], runs: list[sqlite3.Row]
) -> None:
    workflow = workflow_named(batch["workflow"])
    for spec in specs:
        check_stage(workflow, spec.stage)
    rows = [new_run_row(batch, spec, runs) for spec in specs]  # git work outside the lock
    with write(conn):
        for row, spec in zip(rows, specs, strict=True):
            batches_q.insert_run(conn, row)
            if spec.locked:
                conn.execute("UPDATE batch_runs SET locked = 1 WHERE id = ?", (row["id"],))


def evidence_for(conn: sqlite3.Connection, batch: sqlite3.Row, run: sqlite3.Row) -> Evidence:
    reports: dict[str, list[dict[str, Any]]] = {}
    for execution in conn.execute(
        "SELECT id FROM executions WHERE agent_id = ? ORDER BY number", (run["agent_id"],)
    ).fetchall():
        for report in reports_q.reports(conn, execution["id"]):
            reports.setdefault(report["tool"], []).append(json.loads(report["payload"]))
    latest = agents_q.latest_execution(conn, run["agent_id"])
    # Only a re-hashed answer is judged; a tampered one raises AnswerIntegrity (recorded).
    answer = verified_answer(conn, latest, "batch judge") if latest["answer_sha256"] else None
    commits = git.commits_since(Path(run["worktree"]), batch["base_sha"]) if run["worktree"] else []
    return Evidence(answer=answer, reports=reports, commits=commits)


def write_run(conn: sqlite3.Connection, run_id: str, **fields: Any) -> None:
    with write(conn):
        batches_q.update_run(conn, batches_q.get_run(conn, run_id), **fields)


def write_run_if(
    conn: sqlite3.Connection,
    run_id: str,
    expect_state: str | tuple[str, ...],
    expect_attempt: int,
    **fields: Any,
) -> bool:
    """`write_run` only while the run is still in `expect_state` at `expect_attempt` (compare-and-set)."""
    with write(conn):
        run = batches_q.get_run(conn, run_id)
        return run is not None and batches_q.update_run_if(
            conn, run, expect_state=expect_state, expect_attempt=expect_attempt, **fields
        )


def run_verify(command: str, workdir: str, timeout: float) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            command,
            shell=True,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=command_environment(),
        )  # never the daemon's keys
    except subprocess.TimeoutExpired:
        return False, f"verify_command timed out after {timeout:g}s"
    output = (done.stdout + done.stderr)[-VERIFY_OUTPUT_BYTES:]
    return done.returncode == 0, f"exit {done.returncode}\n{output}"


def settled_state(workflow: Workflow, runs: list[sqlite3.Row]) -> tuple[BatchState, str | None]:
    """The batch's state (and reason) that its runs make: blocked when a staged workflow's run
    failed, live while a run waits or runs, then failed or completed."""
    failed = [r for r in runs if r["state"] == RunState.FAILED]
    if workflow.staged and failed:
        first = failed[0]
        return (
            BatchState.BLOCKED,
            f"{first['title']} failed ({first['failure']}); rerun or resume it to continue",
        )
    if any(RunState(r["state"]) in RUN_ACTIVE for r in runs):
        started = any(r["state"] == RunState.RUNNING or r["attempt"] for r in runs)
        return (BatchState.RUNNING if started else BatchState.QUEUED), None
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
            await self.advance(batch["id"])
        return len(batches)

    async def advance(self, batch_id: str) -> None:
        """Decide under the lock, then start agents (awaited) and judge runs (in the background)."""
        async with self.lock:
            actions = await self._decide(batch_id)
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
        specs = workflow.follow_on_runs(cfg, runs)
        if specs:
            await self.ctx.db(insert_runs, batch, specs, runs)
            runs = await self.ctx.db(batches_q.runs, batch_id)
        running = sum(r["state"] == RunState.RUNNING for r in runs)
        for run in runs:
            if running >= cfg["concurrency"]:
                break
            if (
                run["state"] == RunState.QUEUED
                and run["id"] not in self.busy
                and workflow.ready(run, runs)
            ):
                actions += await self.begin_attempt(run, kind="start")
                running += 1
        await self._settle_batch(batch, workflow)
        return actions

    # -- decisions (under the lock) ----------------------------------------------------------

    async def begin_attempt(self, run: sqlite3.Row, *, kind: str) -> list[Action]:
        """Commit the run's next attempt number (compare-and-set) and mark it busy; the agent
        is started by the returned action. Its request_id derives from the attempt, so a daemon
        that dies in between starts no second agent: the same request returns the same one."""
        attempt = run["attempt"] + 1

        def begin(conn: sqlite3.Connection) -> bool:
            with write(conn):
                if not batches_q.update_run_if(
                    conn,
                    run,
                    expect_state=run["state"],
                    expect_attempt=run["attempt"],
                    state=RunState.RUNNING,
                    attempt=attempt,
                    agent_id=None,
                    failure=None,
                ):
                    return False
                batches_q.move_batch(
                    conn, run["batch_id"], expect=BatchState.QUEUED, to=BatchState.RUNNING
                )
                return True

        if not await self.ctx.db(begin):
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
        at_cap, caps = batch_caps(cfg, *await self.ctx.db(batch_spend, batch["id"]))
        if at_cap is not None:  # the batch's spend cap: no new run
            await self.ctx.db(
                write_run_if,
                run["id"],
                RunState.RUNNING,
                action.attempt,
                state=RunState.FAILED,
                failure=at_cap,
            )
            return
        params = StartParams(
            task=run["prompt"],
            workdir=run["workdir"],
            runtime=cfg.get("runtime"),
            model=cfg.get("model"),
            account=cfg.get("account"),
            profile=run["profile"],
            request_id=f"{run['id']}-a{action.attempt}",
            read_roots=workflow.read_roots(run, runs),
            stall_seconds=cfg.get("stall_seconds"),
            wall_seconds=cfg.get("wall_seconds"),
            **caps,
        )
        settings = Config.model_validate(cfg[SETTINGS_KEY]) if SETTINGS_KEY in cfg else None
        try:
            agent = await agent_service.start(
                self.ctx, params, worker_tools=workflow.worker_tools(run["stage"]), config=settings
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

        def attach(conn: sqlite3.Connection) -> bool:
            with write(conn):
                fresh = batches_q.get_run(conn, run["id"])
                if fresh["agent_id"] == agent.id:
                    return True
                if fresh["agent_id"] is not None or not batches_q.update_run_if(
                    conn,
                    fresh,
                    expect_state=RunState.RUNNING,
                    expect_attempt=action.attempt,
                    agent_id=agent.id,
                ):
                    return False
                kind = action.start_kind if action.attempt > 1 else "start"
                batches_q.record_attempt(
                    conn, fresh, attempt=action.attempt, kind=kind, agent_id=agent.id
                )
                return True

        if not await self.ctx.db(
            attach
        ):  # stopped or cancelled while it started: stop the agent too
            await agent_service.cancel(self.ctx, CancelParams(agent_id=agent.id))

    async def _judge(self, action: Action) -> list[Action]:
        """Judge a run whose agent succeeded (its evidence, then verify_command), and commit the
        verdict only if the run is still at that attempt."""
        run = await self.ctx.db(batches_q.get_run, action.run_id)
        batch = await self.ctx.db(batches_q.get_batch, run["batch_id"])
        workflow, cfg = workflow_named(batch["workflow"]), json.loads(batch["config_json"])
        try:
            evidence = await self.ctx.db(evidence_for, batch, run)
        except AnswerIntegrity as exc:  # a tampered answer is never judged
            async with self.lock:
                return await self._fail_run(run, workflow, f"integrity: {exc.message}")
        outcome = workflow.judge(run, evidence, cfg)
        if not outcome.ok:
            async with self.lock:
                return await self._fail_run(run, workflow, outcome.failure or "failed")
        fields: dict[str, Any] = {
            "state": RunState.SUCCEEDED,
            "failure": None,
            "result_json": json.dumps(outcome.result) if outcome.result is not None else None,
        }
        if check := workflow.post_success_check(run, cfg):
            passed, output = await asyncio.to_thread(
                run_verify, check.command, run["workdir"], check.timeout
            )
            fields.update(verify_passed=int(passed), verify_output=output)
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
                state, reason = settled_state(workflow, runs)
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
                await agent_service.cancel(self.ctx, CancelParams(agent_id=run["agent_id"]))
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
