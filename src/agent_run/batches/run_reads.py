"""The `run_show` and `run_answer` tools: one run of a batch, and its agent's sealed answer, by
run id (so a user never has to dig an agent id out of a batch's JSON)."""

import sqlite3

from agent_run.batches.views import get_run_or_raise, run_view
from agent_run.domain import batch_models as bm
from agent_run.domain.errors import AnswerNotReady
from agent_run.domain.requests import AgentParams
from agent_run.domain.views import AnswerView
from agent_run.services import agent_views
from agent_run.services.context import ServiceContext
from agent_run.store import batches as batches_q
from agent_run.store.events import current_revision


async def run_show(ctx: ServiceContext, p: bm.RunParams) -> bm.RunDetail:
    def read(conn: sqlite3.Connection) -> bm.RunDetail:
        conn.execute("BEGIN")
        try:
            run = get_run_or_raise(conn, p.run_id)
            batch = batches_q.get_batch(conn, run["batch_id"])
            return bm.RunDetail(
                batch_id=batch["id"],
                workflow=batch["workflow"],
                batch_state=batch["state"],
                base_sha=batch["base_sha"],
                run=run_view(conn, run),
                revision=current_revision(conn),
            )
        finally:
            conn.execute("COMMIT")

    return await ctx.db(read)


async def run_answer(ctx: ServiceContext, p: bm.RunParams) -> AnswerView:
    run = await ctx.db(get_run_or_raise, p.run_id)
    if not run["agent_id"]:
        raise AnswerNotReady(
            f"run {p.run_id} has no agent yet: it is {run['state']}",
            field="run_id",
            state=run["state"],
        )
    return await agent_views.answer(ctx, AgentParams(agent_id=run["agent_id"]))
