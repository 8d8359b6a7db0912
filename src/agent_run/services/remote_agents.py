"""Admission of an agent on a host (`start --host NAME`): the host's runtime and model checked
against the host's own `models`, the local rows committed (the local record is the agent), then
the host's agent started in the background through the host's executor (docs/scaling.md)."""

import json
import sqlite3
from pathlib import Path, PurePosixPath
from typing import Any

from agent_run.domain import errors
from agent_run.domain.ids import new_agent_id, new_execution_id
from agent_run.domain.requests import StartParams
from agent_run.domain.views import AgentView
from agent_run.executors.ssh import SshExecutor
from agent_run.services.agents import ADMISSION_WRITES, _admit, _request_hash, launch_in_background
from agent_run.services.context import ServiceContext
from agent_run.services.hosts import registry
from agent_run.store import remote as remote_q
from agent_run.store.db import is_storage_full, storage_full

# What a start on a host forwards to the host's own `start` (its task from the row, its
# request_id the local execution id, its host none: the host runs it itself).
FORWARDED = (
    "workdir",
    "runtime",
    "model",
    "account",
    "profile",
    "read_roots",
    "stall_seconds",
    "wall_seconds",
    "max_tokens",
    "max_cost_usd",
)


def resolve_on_host(host: str, models: dict[str, Any], p: StartParams) -> tuple[str, str, str]:
    """(runtime, engine, model) as the host's config has them, or the error naming the field."""
    name = p.runtime or models["default_runtime"]
    runtime = next((r for r in models["runtimes"] if r["runtime"] == name), None)
    if runtime is None:
        known = ", ".join(r["runtime"] for r in models["runtimes"])
        raise errors.UnknownRuntime(
            f"host {host} has no enabled runtime {name!r} (configured there: {known})",
            field="runtime",
        )
    model = p.model or runtime["default_model"] or (runtime["models"] or [None])[0]
    if model is None:
        raise errors.InvalidRequest(
            f"runtime {name!r} on host {host} has no default model: pass one", field="model"
        )
    if runtime["models"] and model not in runtime["models"]:
        raise errors.InvalidRequest(
            f"model {model!r} is not one of runtime {name!r}'s models on host {host}: "
            f"{', '.join(runtime['models'])}",
            field="model",
        )
    return name, runtime["engine"], model


def _admit_on_host(
    conn: sqlite3.Connection,
    agent_row: dict[str, Any],
    execution: dict[str, Any],
    host: str,
    workspace: dict[str, Any] | None,
) -> tuple[AgentView, bool]:
    view, created = _admit(conn, agent_row, execution)
    if created:
        remote_q.insert(conn, execution["id"], host, workspace)
        view = view.model_copy(update={"host": host})  # read before the host was set
    return view, created


def _check_host_start(p: StartParams) -> None:
    """What a start on a host cannot be, checked before the host is asked."""
    if p.route is not None:
        raise errors.InvalidRequest(
            "route auto chooses among this machine's routes; it cannot go with host", field="route"
        )
    if not (PurePosixPath(p.workdir).is_absolute() or p.workdir.startswith("~")):
        raise errors.InvalidRequest(
            "workdir must be an absolute path on the host (or start with ~, the host's home)",
            field="workdir",
        )


def _host_rows(
    p: StartParams,
    agent_id: str,
    execution_id: str,
    resolved: tuple[str, str, str],
    forwarded: dict[str, Any],
    workspace: dict[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The local agent row and its execution for a start on a host."""
    runtime, engine, model = resolved
    agent_row = {
        "id": agent_id,
        "request_id": p.request_id,
        "request_hash": _request_hash(p, runtime, model, p.workdir),
        "runtime": runtime,
        "engine": engine,
        "model": model,
        "workdir": p.workdir,
        "profile": p.profile,
        "notify": (
            json.dumps(p.notify.model_dump(mode="json"), sort_keys=True) if p.notify else None
        ),
    }
    execution = {
        "id": execution_id,
        "kind": "start",
        "prompt": p.task,
        "account": p.account,
        "max_tokens": p.max_tokens,
        "max_cost_usd": p.max_cost_usd,
        # Not an engines.plan.ExecutionPlan: no supervisor runs it here. What the host's
        # `start` is asked (the task is the row's prompt) and where.
        "plan": {
            "host": p.host,
            "runtime": runtime,
            "engine": engine,
            "model": model,
            "workdir": p.workdir,
            "remote_start": forwarded,
            "workspace": workspace,
        },
    }
    return agent_row, execution


async def start_on_host(
    ctx: ServiceContext,
    p: StartParams,
    *,
    worker_tools: list[str] | None = None,
    workspace: dict[str, Any] | None = None,
) -> AgentView:
    """Admit an agent that the host's own agent-run will run, and reply at once (`created`)."""
    assert p.host is not None
    _check_host_start(p)
    link = await registry(ctx).link(p.host)  # unknown host, unreachable, another version: refused
    models = await link.call("models", {}, timeout=60)
    runtime, engine, model = resolve_on_host(p.host, models, p)
    agent_id, execution_id = new_agent_id(), new_execution_id()
    forwarded = {name: getattr(p, name) for name in FORWARDED if getattr(p, name) not in (None, [])}
    forwarded.update(runtime=runtime, model=model, worker_tools=worker_tools or ["finish"])
    agent_row, execution = _host_rows(
        p, agent_id, execution_id, (runtime, engine, model), forwarded, workspace
    )
    ctx.starting.add(execution_id)
    created = False
    try:
        try:
            view, created = await ctx.grouped(
                _admit_on_host, agent_row, execution, p.host, workspace
            )
        except (sqlite3.OperationalError, errors.StorageFull) as exc:
            if is_storage_full(exc):
                raise storage_full(ADMISSION_WRITES, exc) from None
            raise
    finally:
        if created:
            launch_in_background(ctx, agent_id, execution_id)
        else:
            ctx.starting.discard(execution_id)
    return view


async def check_host_runtime(ctx: ServiceContext, p: Any) -> None:
    """A batch's host: configured, reachable, of this version, with the batch's runtime and model
    (its runs there are admitted against the host's own config)."""
    link = await registry(ctx).link(p.host)
    models = await link.call("models", {}, timeout=60)
    resolve_on_host(p.host, models, p)
    if p.route is not None:
        raise errors.InvalidRequest(
            "route auto chooses among this machine's routes; it cannot go with host", field="route"
        )


def run_workspace(batch: sqlite3.Row, run: sqlite3.Row) -> dict[str, Any]:
    """Where a batch run works on the host (`executors/workspace.py`), from its local rows."""
    return {
        "batch_id": batch["id"],
        "project_root": batch["project_root"],
        "subdir": batch["project_subdir"],
        "base_sha": batch["base_sha"],
        "branch": run["branch"],
        "local_worktree": run["worktree"],
        "name": Path(run["worktree"]).name,
    }


async def clean_on_host(ctx: ServiceContext, batch: sqlite3.Row, runs: list[sqlite3.Row]) -> str:
    """`batch clean` of runs that worked on the batch's host: their worktrees and branches there
    too (and the batch's folder once empty). A sentence for the result's message."""
    host = json.loads(batch["config_json"]).get("host")
    runs = [run for run in runs if run["worktree"]]
    if not host or not runs:
        return ""
    try:
        executor = SshExecutor(ctx, registry(ctx), host)
        for run in runs:
            await executor.cleanup(run_workspace(batch, run))
    except errors.DomainError as exc:
        return f"; their copies on host {host} are kept ({exc.code}: {exc.message})"
    return f"; removed on host {host} too"


async def start_run_on_host(
    ctx: ServiceContext,
    params: StartParams,
    host: str,
    batch: sqlite3.Row,
    run: sqlite3.Row,
    worker_tools: list[str],
) -> AgentView:
    """A batch run's agent on the host, in a worktree made there on the run's branch at the
    pinned base (`executors/workspace.py`); its commits come back to the run's local worktree."""
    workspace = run_workspace(batch, run)
    # The read roots are this machine's folders: a run that owns a worktree reads none.
    on_host = params.model_copy(update={"host": host, "read_roots": []})
    return await start_on_host(ctx, on_host, worker_tools=worker_tools, workspace=workspace)
