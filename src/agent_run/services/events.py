"""The `events` tool: an agent's normalized event log (states, commands, reports), a page at a time."""

import json
import sqlite3

from agent_run.domain.requests import EventsParams
from agent_run.domain.views import EventItem, EventsPage
from agent_run.services.agent_views import latest_execution_or_raise
from agent_run.services.context import ServiceContext
from agent_run.store import events as events_q


async def events(ctx: ServiceContext, p: EventsParams) -> EventsPage:
    def read(conn: sqlite3.Connection) -> EventsPage:
        latest_execution_or_raise(conn, p.agent_id)
        rows = events_q.agent_events(
            conn,
            p.agent_id,
            after_seq=p.after_seq,
            limit=p.limit,
            kinds=sorted(set(p.kinds)) if p.kinds is not None else None,
        )
        items = [
            EventItem(
                seq=r["seq"],
                agent_seq=r["agent_seq"],
                execution_id=r["execution_id"],
                kind=r["kind"],
                data=json.loads(r["data"]),
                ts=r["ts"],
            )
            for r in rows
        ]
        return EventsPage(
            agent_id=p.agent_id, items=items, next_after=items[-1].seq if items else p.after_seq
        )

    return await ctx.db(read)
