"""`mirror_read` (socket only): what a daemon on another machine copies of an agent placed here
by its `start --host`: events and messages after its cursors and the execution as it is now,
in one read transaction, so the copy is consistent (docs/scaling.md)."""

import json
import sqlite3

from agent_run.domain.host_models import (
    MirroredEvent,
    MirroredMessage,
    MirroredReport,
    MirrorPage,
    MirrorReadParams,
)
from agent_run.domain.states import ExecutionState
from agent_run.services.agent_views import execution_view, latest_execution_or_raise
from agent_run.services.context import ServiceContext
from agent_run.store import events as events_q
from agent_run.store import reports as reports_q


def read_page(conn: sqlite3.Connection, p: MirrorReadParams) -> MirrorPage:
    conn.execute("BEGIN")
    try:
        execution = latest_execution_or_raise(conn, p.agent_id)
        events = conn.execute(
            "SELECT agent_seq, kind, data, ts FROM events WHERE agent_id = ? AND agent_seq > ?"
            " ORDER BY agent_seq LIMIT ?",
            (p.agent_id, p.after_seq, p.limit),
        ).fetchall()
        messages = events_q.messages_page(conn, p.agent_id, after_id=p.after_message, limit=p.limit)
        ended = ExecutionState(execution["state"]).terminal
        reports = reports_q.reports(conn, execution["id"]) if ended else None
        return MirrorPage(
            agent_id=p.agent_id,
            execution=execution_view(execution),
            events=[
                MirroredEvent(
                    agent_seq=e["agent_seq"], kind=e["kind"], data=json.loads(e["data"]), ts=e["ts"]
                )
                for e in events
            ],
            messages=[
                MirroredMessage(
                    id=m["id"],
                    role=m["role"],
                    name=m["name"],
                    content=m["content"],
                    ts=m["ts"],
                    is_error=bool(m["is_error"]),
                )
                for m in messages
            ],
            reports=None
            if reports is None
            else [
                MirroredReport(tool=r["tool"], payload=json.loads(r["payload"]), ts=r["ts"])
                for r in reports
            ],
            revision=events_q.current_revision(conn),
        )
    finally:
        conn.execute("COMMIT")


async def mirror_read(ctx: ServiceContext, p: MirrorReadParams) -> MirrorPage:
    return await ctx.db(read_page, p)
