"""`GET /events`: server-sent events whose `id:` is the store revision, fed by the change hub.

A reconnect with `Last-Event-ID` (the browser sends it by itself) resumes after that revision,
so nothing is missed across a restart of this process or of the daemon. Each event's data is a
small summary (the changed agent and batch ids); the page fetches what it shows. Events are
coalesced: at most EVENTS_PER_SECOND per client, and everything that happened in between is
merged into the next one. A keep-alive comment goes out after `agent-run web --keep-alive`
seconds of quiet (KEEP_ALIVE_SECONDS by default).
"""

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from agent_run.domain.errors import DomainError, ProtocolError
from agent_run.web.hub import RETRY_SECONDS, Change

EVENTS_PER_SECOND = 10
KEEP_ALIVE_SECONDS = 15.0
RETRY_MILLISECONDS = 1000


def start_revision(request: Request) -> int | None:
    for value in (request.headers.get("last-event-id"), request.query_params.get("after")):
        if value and value.isdigit():
            return int(value)
    return None


def event(change: Change) -> str:
    summary = {
        "agents": sorted(change.agents),
        "batches": sorted(change.batches),
        "truncated": change.truncated,
    }
    return f"id: {change.revision}\nevent: change\ndata: {json.dumps(summary)}\n\n"


async def stream(request: Request) -> AsyncIterator[str]:
    hub = request.app.state.hub
    quiet = request.app.state.keep_alive_seconds
    after = start_revision(request)
    yield f"retry: {RETRY_MILLISECONDS}\n\n"
    while not await request.is_disconnected():
        hub.start()  # (again, if it ever stopped)
        try:
            if after is None:
                await hub.wait_past(-1, quiet)
                if hub.revision is None:
                    yield ": waiting for the daemon\n\n"
                    continue
                after = hub.revision
                yield f"id: {after}\nevent: hello\ndata: {json.dumps({'revision': after})}\n\n"
            change = await hub.catch_up(after)
        except (
            DomainError,
            ProtocolError,
            OSError,
        ) as exc:  # the daemon is away: say so, then try again
            yield f": daemon unavailable ({type(exc).__name__})\n\n"
            await asyncio.sleep(RETRY_SECONDS)
            continue
        if change is None:
            await hub.wait_past(after, quiet)
            if hub.revision is None or hub.revision <= after:
                yield ": keep-alive\n\n"
            continue
        after = change.revision
        yield event(change)
        await asyncio.sleep(1 / EVENTS_PER_SECOND)  # coalesce: later changes join the next event


async def events(request: Request) -> StreamingResponse:
    return StreamingResponse(
        stream(request), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
    )
