"""Agent admission: an idempotent `start`, `resume` (a new execution in the engine's session),
and the background launch of an execution's supervisor. The read side (views, answers,
transcripts, wait) is `services/agent_views.py`; `cancel` and `steer` are
`services/agent_commands.py`."""

import asyncio
import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_run.config.model import Config, RuntimeConfig
from agent_run.domain import errors
from agent_run.domain.failures import FailureKind
from agent_run.domain.ids import new_agent_id, new_execution_id
from agent_run.domain.requests import ResumeParams, StartParams
from agent_run.domain.states import ExecutionState
from agent_run.domain.views import AgentView
from agent_run.engines.accounts import choose_account, options_for_account
from agent_run.engines.plan import ExecutionPlan, PlanInvalid, load_plan
from agent_run.services.accounts import check_roster
from agent_run.services.agent_views import agent_view_in, latest_execution_or_raise, read_agent_view
from agent_run.services.context import ServiceContext
from agent_run.services.notice_send import check_notify
from agent_run.services.placement import executor_for
from agent_run.services.routing import RouteChoice, choose_route
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store import notices as notices_q
from agent_run.store.db import is_storage_full, storage_full, write
from agent_run.system import git
from agent_run.system.home import Home

# -- admission ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SpendGroup:
    """Caps an execution shares with others (a batch's): its supervisor stops it once the
    group's reported total passes one (supervisor/budget.py)."""

    group: str
    max_tokens: int | None
    max_cost_usd: float | None


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


def _outside_home(home_root: Path, folder: Path, field: str) -> None:
    """A folder the sandbox mounts must not be agent-run's home nor inside it (state.db, api.sock,
    other agents' folders), but for its `demos/` (the quick start's repositories). One that
    contains the home is fine: the sandbox masks the home."""
    if Home(home_root).holds_private(folder):
        raise errors.InvalidRequest(
            f"{folder} is inside agent-run's home {home_root.resolve()}: choose a folder outside it",
            field=field,
        )


def _is_folder(path: Path) -> bool:
    """Whether `path` is a directory; False for a path the system cannot even look up (a name
    too long, a folder we may not search), which `Path.is_dir` raises for."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _read_roots(home_root: Path, roots: list[str]) -> list[str]:
    resolved = []
    for index, root in enumerate(roots):
        path = Path(root).expanduser()
        if not path.is_absolute() or not _is_folder(path):
            raise errors.InvalidRequest(
                f"read root {root} is not an absolute path to a directory",
                field=f"read_roots.{index}",
            )
        _outside_home(home_root, path.resolve(), f"read_roots.{index}")
        resolved.append(str(path.resolve()))
    return resolved


def _require_read_roots(roots: list[str]) -> None:
    """A stored plan's read roots must still be folders (the sandbox mounts each)."""
    for index, root in enumerate(roots):
        if not _is_folder(Path(root)):
            raise errors.InvalidRequest(
                f"read root {root} is no longer a directory", field=f"read_roots.{index}"
            )


def _request_hash(p: StartParams, runtime: str, model: str, workdir: str) -> str:
    # Without notify (host, worker_tools) the hash is what it was before they existed (request
    # ids stay valid).
    unset = {"request_id"} | {
        name for name in ("notify", "host", "worker_tools") if getattr(p, name) is None
    }
    payload = p.model_dump(exclude=unset) | {
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
    if agent_row.get("notify"):  # in the same transaction: an admitted agent is never unannounced
        notices_q.insert_target(conn, agent_row["notify"], agent_id=agent_row["id"])
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
    route: RouteChoice | None = None,
    spend_group: SpendGroup | None = None,
    commit_branch: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent row and its first execution (with its plan) for a validated start request
    (`route`: what `--route auto` chose; `p` then names its runtime, model and account;
    `spend_group`: the batch caps it shares; `commit_branch`: see `start`)."""
    config = config or ctx.config
    runtime_name, runtime, model = resolve_runtime(ctx, p, config)
    account = choose_account(runtime, runtime_name, p.account)
    workdir = _checked_workdir(p.workdir)
    _outside_home(ctx.home.root, workdir, "workdir")
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
        nice=supervisor.nice,
        busy_timeout_seconds=supervisor.busy_timeout_seconds,
        # One generated home per agent: its sessions live there for resume, and concurrent
        # agents never share the files that carry their worker tokens.
        engine_home=str(ctx.home.homes_dir / runtime_name / agent_id),
        read_roots=_read_roots(ctx.home.root, p.read_roots),
        worker_tools=worker_tools or ["finish"],
        commit_branch=commit_branch,
    )
    return _agent_row(p, plan, route), {
        "id": execution_id,
        "kind": "start",
        "prompt": p.task,  # the agent's task: stored here only (store/agents.TASK_SQL)
        "account": account,
        "max_tokens": p.max_tokens,
        "max_cost_usd": p.max_cost_usd,
        "route": route.route if route else None,
        "route_reason": route.reason if route else None,
        "plan": plan.model_dump(mode="json"),
        **_spend_columns(spend_group, config.price_of(runtime_name, model)),
    }


def _checked_workdir(workdir: str) -> Path:
    path = Path(workdir).expanduser()
    if not path.is_absolute():
        raise errors.InvalidRequest("workdir must be an absolute path", field="workdir")
    if not _is_folder(path):
        raise errors.InvalidRequest(f"workdir {path} is not an existing directory", field="workdir")
    return path.resolve()


def _agent_row(p: StartParams, plan: ExecutionPlan, route: RouteChoice | None) -> dict[str, Any]:
    """The `agents` row; its request hash is of what was asked (`--route auto`, not the pick)."""
    runtime_name, model, workdir = plan.runtime, plan.model, plan.workdir
    return {
        "id": plan.agent_id,
        "request_id": p.request_id,
        "request_hash": (
            _request_hash(route.requested, "route:auto", "", workdir)
            if route
            else _request_hash(p, runtime_name, model, workdir)
        ),
        "runtime": runtime_name,
        "engine": plan.engine,
        "model": model,
        "workdir": workdir,
        "profile": p.profile,
        "notify": (
            json.dumps(p.notify.model_dump(mode="json"), sort_keys=True) if p.notify else None
        ),
    }


def _spend_columns(group: SpendGroup | None, price: Any) -> dict[str, Any]:
    """The execution's shared caps and its `[prices]` entry, as columns."""
    columns: dict[str, Any] = {}
    if group is not None:
        columns.update(
            spend_group=group.group,
            spend_group_max_tokens=group.max_tokens,
            spend_group_max_cost_usd=group.max_cost_usd,
        )
    if price is not None:
        columns.update(
            price_input_per_mtok=price.input_per_mtok,
            price_output_per_mtok=price.output_per_mtok,
        )
    return columns


async def _commit_branch(p: StartParams) -> str | None:
    """An agent asked for `create_commit` by its caller (not a batch run of this daemon, whose
    branch is its run's: a run's worktree on a host, started by the local daemon) commits only
    on the branch its workdir is on now, whatever the model does to HEAD later."""
    folder = Path(p.workdir).expanduser()
    if "create_commit" not in (p.worker_tools or []) or not folder.is_dir():
        return None  # a workdir that is not there is refused by admission, naming it
    return await asyncio.to_thread(git.current_branch, folder)


async def start(
    ctx: ServiceContext,
    p: StartParams,
    *,
    worker_tools: list[str] | None = None,
    config: Config | None = None,
    spend_group: SpendGroup | None = None,
) -> AgentView:
    """Admit an agent and reply at once (`created`); its supervisor is spawned in the background.

    `worker_tools`, `config` (the settings a batch was created with) and `spend_group` (the
    batch's caps) are for batches (not tool params); without `config` the daemon first takes
    config.toml's changes, if valid.
    """
    if config is None:
        ctx.refresh_config()
    check_notify(p.notify)
    worker_tools = worker_tools or p.worker_tools
    if p.host is not None:  # another machine's agent-run runs it (docs/scaling.md)
        from agent_run.services.remote_agents import start_on_host

        return await start_on_host(ctx, p, worker_tools=worker_tools)
    p, route = await choose_route(ctx, p, config or ctx.config)
    name, runtime, model = resolve_runtime(ctx, p, config)  # the config's models first, then:
    await check_roster(ctx, name, runtime.models, model)
    commit_branch = await _commit_branch(p)
    agent_row, execution = admission_rows(
        ctx, p, worker_tools, config, route, spend_group, commit_branch
    )
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
    """Start the execution's supervisor through its executor (`executors/`: this machine's is a
    fork/exec on a spawn thread, its ready line awaited on the event loop); a failed spawn ends
    the execution `failed`.

    The supervisor takes the row with a compare-and-set on `created`, so a second spawn of the
    same execution (a retry, a restarted daemon) exits without running anything.
    """
    try:
        try:
            executor = await executor_for(ctx, execution_id)
            await executor.spawn(agent_id, execution_id)
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


def _resumable_session(agent_id: str, latest: sqlite3.Row) -> str:
    """The engine session a resume continues, or why this agent cannot be resumed."""
    state = ExecutionState(latest["state"])
    if not state.terminal:
        raise errors.Conflict(
            f"agent {agent_id} is still {state.value}; steer it or wait",
            field="agent_id",
            state=state.value,
        )
    if latest["host"] is not None:
        raise errors.NotResumable(
            f"agent {agent_id} ran on host {latest['host']}: resuming an agent on a host "
            "is not supported yet; start a new one",
            field="agent_id",
        )
    session: str | None = latest["engine_session_id"]
    if session is None:
        raise errors.NotResumable(
            f"agent {agent_id}'s engine never reported a session to resume", field="agent_id"
        )
    return session


# A resume keeps the agent's shared caps and the price it was admitted with.
_KEPT_ON_RESUME = (
    "spend_group",
    "spend_group_max_tokens",
    "spend_group_max_cost_usd",
    "price_input_per_mtok",
    "price_output_per_mtok",
)


async def resume(ctx: ServiceContext, p: ResumeParams) -> AgentView:
    """A new execution of a finished agent that continues its engine session with a new prompt."""
    execution_id = new_execution_id()

    def admit(conn: sqlite3.Connection) -> None:
        with write(conn, "the new execution (its executions and events rows)"):
            latest = latest_execution_or_raise(conn, p.agent_id)
            session = _resumable_session(p.agent_id, latest)
            try:
                previous = load_plan(latest["plan_json"])
            except PlanInvalid as exc:
                raise errors.NotResumable(
                    f"agent {p.agent_id}'s last plan cannot be read: {exc.message}",
                    field="agent_id",
                ) from None
            _require_read_roots(previous.read_roots)
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
                    "route": latest["route"],
                    "route_reason": latest["route_reason"],
                    "plan": plan.model_dump(mode="json"),
                    **{column: latest[column] for column in _KEPT_ON_RESUME},
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
