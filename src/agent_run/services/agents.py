"""Agent services: admission (idempotent start), views, answers, transcripts, waiting, commands."""

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from agent_run.config import Config, RuntimeConfig
from agent_run.domain import errors
from agent_run.domain.failures import FailureKind
from agent_run.domain.ids import new_agent_id, new_execution_id
from agent_run.domain.requests import (
    AgentParams,
    CancelParams,
    ListAgentsParams,
    ResumeParams,
    StartParams,
    SteerParams,
    TranscriptParams,
    WaitParams,
)
from agent_run.domain.states import ExecutionState
from agent_run.domain.views import (
    AgentList,
    AgentSummary,
    AgentView,
    AnswerView,
    CancelResult,
    ExecutionView,
    SteerResult,
    TranscriptItem,
    TranscriptPage,
    WaitResult,
)
from agent_run.engines.accounts import choose_account, options_for_account
from agent_run.engines.plan import ExecutionPlan, PlanInvalid, load_plan
from agent_run.services.context import ServiceContext
from agent_run.services.integrity import answer_verified, verified_answer
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store import events as events_q
from agent_run.store.db import is_storage_full, storage_full, write
from agent_run.supervisor.launch import StartedSupervisor, await_ready, start_supervisor
from agent_run.supervisor.secrets import secret_payload

# -- views --------------------------------------------------------------------------------


def latest_execution_or_raise(conn: sqlite3.Connection, agent_id: str) -> sqlite3.Row:
    execution = agents_q.latest_execution(conn, agent_id)
    if execution is None:
        raise errors.AgentNotFound(f"no agent {agent_id}", field="agent_id")
    return execution


def execution_view(row: sqlite3.Row) -> ExecutionView:
    kind = FailureKind(row["failure_kind"]) if row["failure_kind"] else None
    return ExecutionView(
        id=row["id"],
        number=row["number"],
        kind=row["kind"],
        account=row["account"],
        state=row["state"],
        failure_kind=kind,
        failure_advice=kind.advice if kind else None,
        failure_message=row["failure_message"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        exit_code=row["exit_code"],
        verdict=row["verdict"],
        engine_session_id=row["engine_session_id"],
        answer_sha256=row["answer_sha256"],
        answer_bytes=row["answer_bytes"],
        answer_verified=answer_verified(row),
        answer_checked_at=row["answer_checked_at"],
        usage=json.loads(row["usage_json"]) if row["usage_json"] else None,
        cost_usd=row["cost_usd"],
        max_tokens=row["max_tokens"],
        max_cost_usd=row["max_cost_usd"],
    )


def read_agent_view(conn: sqlite3.Connection, agent_id: str) -> AgentView:
    # One read transaction, so the view is consistent with the revision it reports.
    conn.execute("BEGIN")
    try:
        view = agent_view_in(conn, agent_id)
    finally:
        conn.execute("COMMIT")
    return view


def agent_view_in(conn: sqlite3.Connection, agent_id: str) -> AgentView:
    """The agent's view, read inside the caller's transaction."""
    agent = agents_q.get_agent(conn, agent_id)
    if agent is None:
        raise errors.AgentNotFound(f"no agent {agent_id}", field="agent_id")
    execution = agents_q.latest_execution(conn, agent_id)
    last = events_q.last_message(conn, agent_id)
    return AgentView(
        id=agent["id"],
        request_id=agent["request_id"],
        runtime=agent["runtime"],
        engine=agent["engine"],
        model=agent["model"],
        account=execution["account"],
        task=agent["task"],
        workdir=agent["workdir"],
        profile=agent["profile"],
        created_at=agent["created_at"],
        state=execution["state"],
        failure_kind=execution["failure_kind"],
        verdict=execution["verdict"],
        answer_verified=answer_verified(execution),
        execution=execution_view(execution),
        event_count=events_q.count_events(conn, agent_id),
        last_message=last["content"][:300] if last else None,
        revision=events_q.current_revision(conn),
    )


async def agent(ctx: ServiceContext, p: AgentParams) -> AgentView:
    return await ctx.db(read_agent_view, p.agent_id)


async def list_agents(ctx: ServiceContext, p: ListAgentsParams) -> AgentList:
    """A page of agents; with `after_revision`, a revisioned long-poll for what changed since."""
    if p.after_revision is not None and p.wait_seconds > 0:
        if await ctx.db(events_q.current_revision) <= p.after_revision:
            await ctx.watcher.wait_past(p.after_revision, p.wait_seconds)

    def read(conn: sqlite3.Connection) -> AgentList:
        revision = events_q.current_revision(conn)
        rows, total = agents_q.list_agents(
            conn,
            states=[s.value for s in p.state or []],
            runtime=p.runtime,
            after_revision=p.after_revision,
            limit=p.limit,
            offset=p.offset,
        )
        items = [
            AgentSummary(
                id=r["id"],
                request_id=r["request_id"],
                runtime=r["runtime"],
                model=r["model"],
                account=r["account"],
                state=r["state"],
                failure_kind=r["failure_kind"],
                task_preview=r["task"].strip().splitlines()[0][:120] if r["task"].strip() else "",
                created_at=r["created_at"],
                updated_at=r["updated_at"],
                answer_sha256=r["answer_sha256"],
                answer_verified=answer_verified(r),
                verdict=r["verdict"],
            )
            for r in rows
        ]
        return AgentList(
            items=items, total=total, limit=p.limit, offset=p.offset, revision=revision
        )

    return await ctx.db(read)


# -- admission ----------------------------------------------------------------------------


def resolve_runtime(
    ctx: ServiceContext, p: StartParams | Any, config: Config | None = None
) -> tuple[str, RuntimeConfig, str]:
    """(name, config, model) for a request's runtime and model, or an error naming the field.
    `config` is a batch's own settings (else the daemon's current config)."""
    config = config or ctx.config
    name = p.runtime or config.default_runtime
    runtime = config.runtimes.get(name)
    if runtime is None or not runtime.enabled:
        known = ", ".join(n for n, r in config.runtimes.items() if r.enabled)
        raise errors.UnknownRuntime(
            f"no enabled runtime {name!r} (configured: {known})", field="runtime"
        )
    model = p.model or runtime.default_model or (runtime.models[0] if runtime.models else None)
    if model is None:
        raise errors.InvalidRequest(
            f"runtime {name!r} has no default model: pass one", field="model"
        )
    if runtime.models and model not in runtime.models:
        raise errors.InvalidRequest(
            f"model {model!r} is not one of runtime {name!r}'s models: {', '.join(runtime.models)}",
            field="model",
        )
    return name, runtime, model


def _read_roots(roots: list[str]) -> list[str]:
    resolved = []
    for index, root in enumerate(roots):
        path = Path(root).expanduser()
        if not path.is_absolute() or not path.is_dir():
            raise errors.InvalidRequest(
                f"read root {root} is not an absolute path to a directory",
                field=f"read_roots.{index}",
            )
        resolved.append(str(path.resolve()))
    return resolved


def _request_hash(p: StartParams, runtime: str, model: str, workdir: str) -> str:
    payload = p.model_dump(exclude={"request_id"}) | {
        "runtime": runtime,
        "model": model,
        "workdir": workdir,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


ADMISSION_WRITES = "the new agent (its agents, executions and events rows)"


def _admit(conn: sqlite3.Connection, agent_row: dict, execution: dict) -> tuple[AgentView, bool]:
    """Insert the agent, or find the one this request_id already made. (its view, created)

    Runs inside a grouped write transaction (`ctx.grouped`); the view is what it commits.
    """
    if agent_row["request_id"] is not None:
        existing = agents_q.get_agent_by_request(conn, agent_row["request_id"])
        if existing is not None:
            if existing["request_hash"] != agent_row["request_hash"]:
                raise errors.Conflict(
                    f"request_id {agent_row['request_id']!r} was used for a different request "
                    f"(agent {existing['id']})",
                    field="request_id",
                    agent_id=existing["id"],
                )
            return agent_view_in(conn, existing["id"]), False
    agents_q.insert_agent_with_execution(conn, agent=agent_row, execution=execution)
    return agent_view_in(conn, agent_row["id"]), True


def _mark_spawn_failed(conn: sqlite3.Connection, execution_id: str, message: str) -> None:
    with write(conn):
        row = agents_q.get_execution(conn, execution_id)
        if row["state"] == ExecutionState.CREATED:  # the supervisor never took it over
            agents_q.transition(
                conn,
                execution_id,
                ExecutionState.FAILED,
                failure_kind=FailureKind.SUPERVISOR_FAILED.value,
                failure_message=message,
            )
            for command in commands_q.pending(conn, execution_id):  # queued before the spawn
                commands_q.resolve(
                    conn, command, state="refused", result="the supervisor never started"
                )


def admission_rows(
    ctx: ServiceContext,
    p: StartParams,
    worker_tools: list[str] | None = None,
    config: Config | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent row and its first execution (with its plan) for a validated start request."""
    config = config or ctx.config
    runtime_name, runtime, model = resolve_runtime(ctx, p, config)
    account = choose_account(runtime, runtime_name, p.account)
    workdir = Path(p.workdir).expanduser()
    if not workdir.is_absolute():
        raise errors.InvalidRequest("workdir must be an absolute path", field="workdir")
    if not workdir.is_dir():
        raise errors.InvalidRequest(
            f"workdir {workdir} is not an existing directory", field="workdir"
        )
    workdir = workdir.resolve()
    agent_id, execution_id = new_agent_id(), new_execution_id()
    supervisor = config.supervisor
    plan = ExecutionPlan(
        agent_id=agent_id,
        execution_id=execution_id,
        runtime=runtime_name,
        engine=runtime.engine,
        model=model,
        workdir=str(workdir),
        profile=p.profile,
        runtime_config=options_for_account(runtime, runtime_name, account, ctx.home.root),
        stall_seconds=p.stall_seconds or runtime.stall_seconds or supervisor.stall_seconds,
        wall_seconds=p.wall_seconds or runtime.wall_seconds or supervisor.wall_seconds,
        cancel_grace_seconds=supervisor.cancel_grace_seconds,
        storage_buffer_bytes=supervisor.storage_buffer_bytes,
        storage_wait_seconds=supervisor.storage_wait_seconds,
        # One generated home per agent: its sessions live there for resume, and concurrent
        # agents never share the files that carry their worker tokens.
        engine_home=str(ctx.home.homes_dir / runtime_name / agent_id),
        read_roots=_read_roots(p.read_roots),
        worker_tools=worker_tools or ["finish"],
    )
    agent_row = {
        "id": agent_id,
        "request_id": p.request_id,
        "request_hash": _request_hash(p, runtime_name, model, str(workdir)),
        "runtime": runtime_name,
        "engine": runtime.engine,
        "model": model,
        "task": p.task,
        "workdir": str(workdir),
        "profile": p.profile,
    }
    return agent_row, {
        "id": execution_id,
        "kind": "start",
        "prompt": p.task,
        "account": account,
        "max_tokens": p.max_tokens,
        "max_cost_usd": p.max_cost_usd,
        "plan": plan.model_dump(mode="json"),
    }


async def start(
    ctx: ServiceContext,
    p: StartParams,
    *,
    worker_tools: list[str] | None = None,
    config: Config | None = None,
) -> AgentView:
    """Admit an agent and reply at once (`created`); its supervisor is spawned in the background.

    `worker_tools` and `config` (the settings a batch was created with) are for batches (not
    tool params); without `config` the daemon first takes config.toml's changes, if valid.
    """
    if config is None:
        ctx.refresh_config()
    agent_row, execution = admission_rows(ctx, p, worker_tools, config)
    execution_id = execution["id"]
    # Reconciliation must not judge a row whose supervisor we are about to spawn: the id joins
    # `starting` before its row is committed and leaves once the spawn has settled.
    ctx.starting.add(execution_id)
    created = False
    try:
        try:
            try:
                view, created = await ctx.grouped(_admit, agent_row, execution)
            except (
                sqlite3.IntegrityError
            ):  # a concurrent start with the same request_id won the race
                view, created = await ctx.grouped(_admit, agent_row, execution)
        except (sqlite3.OperationalError, errors.StorageFull) as exc:
            if is_storage_full(exc):  # the group rolled back: nothing of this agent was kept
                raise storage_full(ADMISSION_WRITES, exc) from None
            raise
    finally:
        if created:
            launch_in_background(ctx, agent_row["id"], execution_id)
        else:
            ctx.starting.discard(execution_id)
    return view


def launch_in_background(ctx: ServiceContext, agent_id: str, execution_id: str) -> None:
    """Spawn a committed execution's supervisor after the caller replies.

    The caller has put `execution_id` in `ctx.starting`; the launch takes it out when settled.
    """
    ctx.in_background(launch_execution(ctx, agent_id, execution_id), name=f"launch-{execution_id}")


async def launch_execution(ctx: ServiceContext, agent_id: str, execution_id: str) -> None:
    """Start the execution's supervisor (fork/exec on a spawn thread) and wait on the event loop
    until it is ready; a failed spawn ends the execution `failed`.

    The supervisor takes the row with a compare-and-set on `created`, so a second spawn of the
    same execution (a retry, a restarted daemon) exits without running anything.
    """

    def spawn(payload: bytes) -> StartedSupervisor:
        directory = ctx.home.execution_dir(agent_id, execution_id)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return start_supervisor(ctx.home, execution_id, directory / "supervisor.log", payload)

    try:
        try:
            async with ctx.supervisors_starting:  # bounded: each start is an interpreter boot
                # The credential goes to the supervisor over its stdin, resolved now: a
                # respawn after a daemon restart resolves it again from the new environment.
                payload = await ctx.db(secret_payload, execution_id)
                started = await ctx.spawn(spawn, payload)
                await await_ready(started)
        except errors.SpawnFailed as exc:
            await ctx.db(_mark_spawn_failed, execution_id, exc.message)
        except Exception as exc:  # recorded on the row, not left for a guess
            if ctx.log is not None:
                ctx.log.exception("spawn.error", execution_id=execution_id)
            await ctx.db(_mark_spawn_failed, execution_id, f"cannot start supervisor: {exc!r}")
    finally:
        # Whatever happened, the row is no longer `created` or a later reconciliation pass
        # finds it orphaned and spawns it again.
        ctx.starting.discard(execution_id)


async def adopt_orphan(ctx: ServiceContext, agent_id: str, execution_id: str) -> bool:
    """Spawn a committed execution no supervisor ever took (its spawner died). True if launched."""
    if execution_id in ctx.starting:
        return False
    ctx.starting.add(execution_id)
    try:
        row = await ctx.db(agents_q.get_execution, execution_id)
    except BaseException:
        ctx.starting.discard(execution_id)
        raise
    if row is None or row["state"] != ExecutionState.CREATED or row["supervisor_pid"] is not None:
        ctx.starting.discard(execution_id)
        return False
    launch_in_background(ctx, agent_id, execution_id)
    return True


async def resume(ctx: ServiceContext, p: ResumeParams) -> AgentView:
    """A new execution of a finished agent that continues its engine session with a new prompt."""
    execution_id = new_execution_id()

    def admit(conn: sqlite3.Connection) -> None:
        with write(conn, "the new execution (its executions and events rows)"):
            latest = latest_execution_or_raise(conn, p.agent_id)
            state = ExecutionState(latest["state"])
            if not state.terminal:
                raise errors.Conflict(
                    f"agent {p.agent_id} is still {state.value}; steer it or wait",
                    field="agent_id",
                    state=state.value,
                )
            session = latest["engine_session_id"]
            if session is None:
                raise errors.NotResumable(
                    f"agent {p.agent_id}'s engine never reported a session to resume",
                    field="agent_id",
                )
            try:
                previous = load_plan(latest["plan_json"])
            except PlanInvalid as exc:
                raise errors.NotResumable(
                    f"agent {p.agent_id}'s last plan cannot be read: {exc.message}",
                    field="agent_id",
                ) from None
            plan = previous.model_copy(
                update={"execution_id": execution_id, "resume_session_id": session}
            )
            agents_q.insert_execution(
                conn,
                agent_id=p.agent_id,
                execution={
                    "id": execution_id,
                    "kind": "resume",
                    "prompt": p.prompt,
                    "account": latest["account"],
                    "max_tokens": latest["max_tokens"],
                    "max_cost_usd": latest["max_cost_usd"],
                    "plan": plan.model_dump(mode="json"),
                },
            )

    ctx.starting.add(execution_id)
    try:
        await ctx.db(admit)
    except BaseException:
        ctx.starting.discard(execution_id)
        raise
    launch_in_background(ctx, p.agent_id, execution_id)
    return await ctx.db(read_agent_view, p.agent_id)


# -- answers and transcripts ----------------------------------------------------------------


async def answer(ctx: ServiceContext, p: AgentParams) -> AnswerView:
    def read(conn: sqlite3.Connection) -> AnswerView:
        row = latest_execution_or_raise(conn, p.agent_id)
        if row["answer_sha256"] is None:
            state = ExecutionState(row["state"])
            why = "is still " + state.value if not state.terminal else f"ended {state.value}"
            kind = f" ({row['failure_kind']})" if row["failure_kind"] else ""
            raise errors.AnswerNotReady(
                f"agent {p.agent_id} has no sealed answer: it {why}{kind}",
                field="agent_id",
                state=state.value,
            )
        text = verified_answer(conn, row, "answer")  # a mismatch is recorded, then raised
        return AnswerView(
            agent_id=p.agent_id,
            execution_id=row["id"],
            text=text,
            sha256=row["answer_sha256"],
            bytes=row["answer_bytes"],
            path=row["answer_path"],
        )

    return await ctx.db(read)


async def transcript(ctx: ServiceContext, p: TranscriptParams) -> TranscriptPage:
    def read(conn: sqlite3.Connection) -> TranscriptPage:
        execution = latest_execution_or_raise(conn, p.agent_id)  # read state first: no lost tail
        rows = events_q.messages_page(conn, p.agent_id, after_id=p.cursor, limit=p.limit)
        items = [
            TranscriptItem(
                id=r["id"],
                execution_number=r["execution_number"],
                role=r["role"],
                name=r["name"],
                content=r["content"],
                ts=r["ts"],
                is_error=bool(r["is_error"]),
            )
            for r in rows
        ]
        state = ExecutionState(execution["state"])
        return TranscriptPage(
            agent_id=p.agent_id,
            items=items,
            next_cursor=items[-1].id if items else p.cursor,
            state=state,
            finished=state.terminal and len(items) < p.limit,
        )

    return await ctx.db(read)


# -- waiting ----------------------------------------------------------------------------------


async def wait(ctx: ServiceContext, p: WaitParams) -> WaitResult:
    deadline = time.monotonic() + p.timeout_seconds
    while True:
        view = await ctx.db(read_agent_view, p.agent_id)
        if view.state.terminal:
            return WaitResult(agent=view, timed_out=False)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return WaitResult(agent=view, timed_out=True)
        await ctx.watcher.wait_past(view.revision, remaining)


# -- commands ----------------------------------------------------------------------------------


async def cancel(ctx: ServiceContext, p: CancelParams) -> CancelResult:
    def enqueue(conn: sqlite3.Connection) -> CancelResult:
        with write(conn):
            execution = latest_execution_or_raise(conn, p.agent_id)
            state = ExecutionState(execution["state"])
            if state.terminal:
                return CancelResult(
                    agent_id=p.agent_id,
                    accepted=False,
                    state=state,
                    message=f"agent already {state.value}; nothing to cancel",
                )
            if state is ExecutionState.CANCELLING or commands_q.pending_kind(
                conn, execution["id"], "cancel"
            ):
                return CancelResult(
                    agent_id=p.agent_id,
                    accepted=True,
                    state=state,
                    message="a cancel is already under way",
                )
            commands_q.enqueue(
                conn, agent_id=p.agent_id, execution_id=execution["id"], kind="cancel", payload={}
            )
            return CancelResult(
                agent_id=p.agent_id,
                accepted=True,
                state=state,
                message="cancel queued: interrupt, then TERM, then KILL of the engine group",
            )

    return await ctx.db(enqueue)


async def steer(ctx: ServiceContext, p: SteerParams) -> SteerResult:
    def enqueue(conn: sqlite3.Connection) -> int:
        with write(conn):
            execution = latest_execution_or_raise(conn, p.agent_id)
            state = ExecutionState(execution["state"])
            # A `created` agent (start replied, spawn under way) takes it as its next turn too.
            if state not in (
                ExecutionState.CREATED,
                ExecutionState.STARTING,
                ExecutionState.RUNNING,
            ):
                raise errors.NotRunning(
                    f"agent {p.agent_id} is {state.value}; only a running agent can be steered",
                    field="agent_id",
                    state=state.value,
                )
            return commands_q.enqueue(
                conn,
                agent_id=p.agent_id,
                execution_id=execution["id"],
                kind="steer",
                payload={"text": p.text},
            )

    # Wait briefly for the supervisor's verdict so the caller learns delivered / refused. The
    # revision is read before each look at the row: a resolution after the look moves it past.
    seen = ctx.watcher.revision
    command_id = await ctx.db(enqueue)
    deadline = time.monotonic() + 5.0
    while True:
        row = await ctx.db(commands_q.get, command_id)
        if row["state"] != "pending" or time.monotonic() >= deadline:
            break
        await ctx.watcher.wait_past(seen, max(0.0, deadline - time.monotonic()))
        seen = ctx.watcher.revision
    state = row["state"] if row["state"] in ("delivered", "refused") else "pending"
    message = row["result"] or "queued; the supervisor has not picked it up yet"
    return SteerResult(agent_id=p.agent_id, command_id=command_id, state=state, message=message)
