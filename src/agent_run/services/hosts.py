"""The hosts of `[hosts.NAME]` as the daemon sees them: the `hosts` tool, and the registry of
their links (`executors/ssh.py`) made on first use."""

import asyncio
import sqlite3

from agent_run.domain.errors import DomainError
from agent_run.domain.failures import FailureKind
from agent_run.domain.host_models import (
    AbandonParams,
    AbandonResult,
    HostsParams,
    HostsResult,
    HostView,
)
from agent_run.domain.states import TERMINAL_STATES, ExecutionState
from agent_run.executors.mirror import HostMirror
from agent_run.executors.ssh import HostRegistry
from agent_run.services.agent_views import latest_execution_or_raise
from agent_run.services.context import ServiceContext
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store import remote as remote_q
from agent_run.store.db import sql_list, write


def registry(ctx: ServiceContext) -> HostRegistry:
    """The daemon's one registry of host links (it reads the current config's hosts)."""
    if ctx.hosts is None:
        ctx.hosts = HostRegistry(lambda: ctx.config.hosts, ctx.log)
    registry_: HostRegistry = ctx.hosts
    return registry_


def _agent_counts(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """host -> (live agents, unreachable ones), from the local record."""
    rows = conn.execute(
        "SELECT host, count(*) AS live, sum(state = ?) AS cut FROM executions"
        f" WHERE host IS NOT NULL AND state NOT IN {sql_list(TERMINAL_STATES)} GROUP BY host",
        (ExecutionState.UNREACHABLE,),
    ).fetchall()
    return {row["host"]: (row["live"], row["cut"] or 0) for row in rows}


async def hosts(ctx: ServiceContext, p: HostsParams) -> HostsResult:
    ctx.refresh_config()
    reg = registry(ctx)
    if p.check:
        for name in reg.names():
            try:
                await reg.link(name)
            except DomainError:
                pass  # reported below as its last error
    counts = await ctx.db(_agent_counts)
    items = []
    for name in reg.names():
        config, state = reg.config(name), reg.state(name)
        link = state.link if state.link is not None and state.link.connected else None
        live, cut = counts.get(name, (0, 0))
        items.append(
            HostView(
                name=name,
                ssh=config.ssh,
                connected=link is not None,
                version=link.remote_version if link else None,
                daemon_pid=link.remote_daemon.get("pid") if link else None,
                remote_home=link.remote_daemon.get("home") if link else None,
                ssh_pid=link.ssh_pid if link else None,
                last_error=state.last_error.message if state.last_error else None,
                last_error_code=state.last_error.code if state.last_error else None,
                live_agents=live,
                unreachable_agents=cut,
            )
        )
    return HostsResult(items=items)


async def mirror_forever(ctx: ServiceContext) -> None:
    """The daemon's loop: one host mirror (`executors/mirror.py`) for each host that has live
    executions here, restarted when it ended and more were placed there."""
    mirrors: dict[str, asyncio.Task[None]] = {}
    while True:
        try:
            for host in await ctx.db(remote_q.live_hosts):
                task = mirrors.get(host)
                if task is None or task.done():
                    mirrors[host] = asyncio.get_running_loop().create_task(
                        HostMirror(ctx, registry(ctx), host).run(), name=f"mirror-{host}"
                    )
        except Exception as exc:  # keep going; the next look may succeed
            if ctx.log is not None:
                ctx.log.error("host.mirrors_error", error=repr(exc))
        await asyncio.sleep(MIRROR_LOOK_SECONDS)


MIRROR_LOOK_SECONDS = 0.5


def _abandon(conn: sqlite3.Connection, agent_id: str) -> AbandonResult:
    with write(conn, "an abandoned agent's state"):
        execution = latest_execution_or_raise(conn, agent_id)
        state = ExecutionState(execution["state"])
        if state is not ExecutionState.UNREACHABLE:
            why = "ended" if state.terminal else "is not cut off"
            return AbandonResult(
                agent_id=agent_id,
                abandoned=False,
                state=state,
                message=f"agent {agent_id} is {state.value}: only an unreachable agent can be "
                f"abandoned (this one {why}; `cancel` stops a live one)",
            )
        message = (
            f"abandoned while its host {execution['host']} was unreachable; it may still be "
            "running there"
        )
        agents_q.transition(
            conn,
            execution["id"],
            ExecutionState.FAILED,
            failure_kind=FailureKind.ABANDONED.value,
            failure_message=message,
        )
        for command in commands_q.pending(conn, execution["id"]):
            commands_q.resolve(conn, command, state="refused", result="the agent was abandoned")
        return AbandonResult(
            agent_id=agent_id, abandoned=True, state=ExecutionState.FAILED, message=message
        )


async def abandon(ctx: ServiceContext, p: AbandonParams) -> AbandonResult:
    """Give up on an agent whose host is unreachable: it ends here `failed` / `abandoned`. Only
    the user can decide this: no elapsed time ever does."""
    return await ctx.db(_abandon, p.agent_id)
