"""The `changes` tool: which agents and batches changed after a revision, as a long-poll."""

import sqlite3

from agent_run.domain.requests import ChangesParams
from agent_run.domain.views import ChangesResult
from agent_run.services.context import ServiceContext
from agent_run.store import events as events_q


async def changes(ctx: ServiceContext, p: ChangesParams) -> ChangesResult:
    if p.wait_seconds > 0 and await ctx.db(events_q.current_revision) <= p.after_revision:
        await ctx.watcher.wait_past(p.after_revision, p.wait_seconds)

    def read(conn: sqlite3.Connection) -> ChangesResult:
        conn.execute("BEGIN")
        try:
            revision = events_q.current_revision(conn)
            ids = events_q.changed_since(conn, p.after_revision, revision, 2 * p.limit)
        finally:
            conn.execute("COMMIT")
        agents = [i for i in ids if i.startswith("ag_")]
        batches = [i for i in ids if i.startswith("bt_")]
        truncated = len(agents) > p.limit or len(batches) > p.limit
        return ChangesResult(
            after_revision=p.after_revision,
            revision=revision,
            agents=agents[: p.limit],
            batches=batches[: p.limit],
            truncated=truncated,
        )

    return await ctx.db(read)
