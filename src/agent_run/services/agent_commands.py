"""Agent commands: `cancel` and `steer` queue a command for the agent's running supervisor,
which resolves it (delivered or refused); `steer` waits briefly for that verdict."""

import sqlite3
import time

from agent_run.domain import errors
from agent_run.domain.requests import CancelParams, SteerParams
from agent_run.domain.states import ExecutionState
from agent_run.domain.views import CancelResult, SteerResult
from agent_run.services.agent_views import latest_execution_or_raise
from agent_run.services.context import ServiceContext
from agent_run.store import commands as commands_q
from agent_run.store.db import write


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
            # A `created` agent (start replied, spawn under way) takes it as its next turn too;
            # an `unreachable` one's is forwarded to its host when the host answers again.
            if state not in (
                ExecutionState.CREATED,
                ExecutionState.STARTING,
                ExecutionState.RUNNING,
                ExecutionState.UNREACHABLE,
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
    message = row["result"] or (
        f"not read yet by the agent's supervisor (command {command_id}): it is delivered if the "
        "engine is still running when the supervisor reads it, else refused; `events` with "
        'kinds ["command"] shows which'
    )
    return SteerResult(agent_id=p.agent_id, command_id=command_id, state=state, message=message)
