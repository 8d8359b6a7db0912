"""`GET /events`: server-sent events whose `id:` is the store revision, fed by the `changes` tool.

A reconnect with `Last-Event-ID` (the browser sends it by itself) resumes after that revision,
so nothing is missed across a restart of this process or of the daemon. Each event's data is a
small summary (the changed agent and batch ids); the page fetches what it shows. Events are
coalesced: one `changes` long-poll at a time and at most EVENTS_PER_SECOND per client.
"""

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from agent_run.domain.errors import DomainError

EVENTS_PER_SECOND = 10
LONG_POLL_SECONDS = 15.0
RETRY_MILLISECONDS = 1000
NOW = 2**62  # an after_revision past any real one: `changes` then only reports the revision


def start_revision(request: Request) -> int | None:
    for value in (request.headers.get("last-event-id"), request.query_params.get("after")):
        if value and value.isdigit():
            return int(value)
    return None


async def stream(request: Request) -> AsyncIterator[str]:
    proxy = request.app.state.proxy
    after = start_revision(request)
    yield f"retry: {RETRY_MILLISECONDS}\n\n"
    while not await request.is_disconnected():
        try:
            if after is None:
                after = (await proxy.call("changes", {"after_revision": NOW}))["revision"]
                yield f"id: {after}\nevent: hello\ndata: {json.dumps({'revision': after})}\n\n"
            result = await proxy.call("changes", {"after_revision": after, "wait_seconds": LONG_POLL_SECONDS})
        except DomainError as exc:  # the daemon is away: say so, then try again
            yield f": daemon unavailable ({exc.code})\n\n"
            await asyncio.sleep(RETRY_MILLISECONDS / 1000)
            continue
        if result["revision"] > after:
            after = result["revision"]
            summary = {k: result[k] for k in ("agents", "batches", "truncated")}
            yield f"id: {after}\nevent: change\ndata: {json.dumps(summary)}\n\n"
            await asyncio.sleep(1 / EVENTS_PER_SECOND)  # coalesce: later changes join the next event
        else:
            yield ": keep-alive\n\n"


async def events(request: Request) -> StreamingResponse:
    return StreamingResponse(stream(request), media_type="text/event-stream",
                             headers={"x-accel-buffering": "no"})
