"""Which executor runs an execution: this machine's (`LocalExecutor`), or its host's
(`SshExecutor`, for an execution placed with `start --host`)."""

from agent_run.executors import Executor
from agent_run.executors.local import LocalExecutor
from agent_run.executors.ssh import SshExecutor
from agent_run.services.context import ServiceContext
from agent_run.services.hosts import registry
from agent_run.store import agents as agents_q


async def executor_for(ctx: ServiceContext, execution_id: str) -> Executor:
    """The executor of an admitted execution."""
    row = await ctx.db(agents_q.get_execution, execution_id)
    if row is not None and row["host"] is not None:
        return SshExecutor(ctx, registry(ctx), row["host"])
    return LocalExecutor(ctx)
