"""`status`: what the daemon is (pid, home, version, uptime), the config it runs with (and a
refused newer one), and how many agents are live."""

import os
import time
from typing import Any

from agent_run import __version__
from agent_run.domain.daemon_views import ConfigRefusal, DaemonStatus
from agent_run.domain.requests import EmptyParams
from agent_run.services.context import ServiceContext
from agent_run.store import agents as agents_q


def config_refusal(ctx: ServiceContext) -> ConfigRefusal | None:
    refused = ctx.live.refused if ctx.live is not None else None
    if refused is None:
        return None
    return ConfigRefusal(
        message=refused.message, field=refused.field, revision=refused.revision, at=refused.at
    )


async def status(ctx: ServiceContext, _p: EmptyParams) -> DaemonStatus:
    ctx.refresh_config()
    live: Any = ctx.live
    agents = {row["agent_id"] for row in await ctx.db(agents_q.live_executions)}
    return DaemonStatus(
        pid=os.getpid(),
        home=str(ctx.home.root),
        version=__version__,
        started_at=ctx.started_at,
        uptime_seconds=round(time.time() - ctx.started_at, 3),
        config_path=str(ctx.home.config_path),
        config_file_exists=ctx.home.config_path.exists(),
        config_revision=live.revision if live is not None else "unknown",
        config_loaded_at=live.loaded_at if live is not None else ctx.started_at,
        config_refused=config_refusal(ctx),
        live_agents=len(agents),
    )
