"""Live refreshes of one page are rendered once per moment, however many tabs ask.

When an event arrives, every open tab showing a page re-fetches it (header `X-Live: 1`,
`X-Revision`: the id of the event it got). Per URL the web process keeps the last render with
the revision it is at least as new as, renders at most one at a time and at most one per
MIN_RENDER_SECONDS: a refresh asking for a revision that render covers gets its bytes; one
arriving while a render is under way waits for it (and, if that one is too old for it, for the
next, which it then shares with every other tab that waited). So twenty tabs on two pages cost
the daemon about the tool calls of two pages twice a second, not of twenty pages.

Only while the hub follows the daemon (so its revision is current), only for live refreshes (a
navigation always renders afresh, and re-verifies the answer) and only successful pages.
"""

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

MAX_PAGES = 128
MIN_RENDER_SECONDS = 0.5  # live.js refreshes a tab at most this often, too
Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class Render:
    revision: int  # the page shows the store at this revision or later
    body: bytes
    done_at: float


@dataclass
class LiveCache:
    pages: OrderedDict[str, Render] = field(default_factory=OrderedDict)
    flights: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    renders: int = 0  # how many live renders ran (what the daemon paid for)
    shared: int = 0  # how many live refreshes were answered from another tab's render

    def fresh(self, key: str, wanted: int) -> Render | None:
        hit = self.pages.get(key)
        if hit is not None and hit.revision >= wanted:
            self.pages.move_to_end(key)
            return hit
        return None

    def keep(self, key: str, render: Render) -> None:
        old = self.pages.get(key)
        if old is None or old.revision <= render.revision:
            self.pages[key] = render
            self.pages.move_to_end(key)
            while len(self.pages) > MAX_PAGES:
                self.pages.popitem(last=False)


async def _render(
    cache: LiveCache, key: str, request: Request, handler: Handler, wanted: int
) -> Response:
    """This request renders the page for everyone waiting on `key`, after the pause since the last."""
    flight: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cache.flights[key] = flight
    try:
        last = cache.pages.get(key)
        if last is not None:
            await asyncio.sleep(max(0.0, last.done_at + MIN_RENDER_SECONDS - time.monotonic()))
        hub = request.app.state.hub
        # The event `wanted` was sent before this request came: the daemon is at least there.
        started_at = max(hub.revision or 0, wanted)
        response = await handler(request)
        cache.renders += 1
        response.headers["x-live-render"] = "rendered"
        if response.status_code == 200:
            cache.keep(key, Render(started_at, bytes(response.body), time.monotonic()))
        return response
    finally:
        del cache.flights[key]
        flight.set_result(None)


def live_cached(handler: Handler) -> Handler:
    async def cached(request: Request) -> Response:
        hub = request.app.state.hub
        if request.headers.get("x-live") != "1" or not hub.connected or hub.revision is None:
            return await handler(request)
        wanted_header = request.headers.get("x-revision", "")
        wanted = int(wanted_header) if wanted_header.isdigit() else hub.revision
        cache: LiveCache = request.app.state.live_cache
        key = str(request.url.path) + "?" + request.url.query
        while True:
            hit = cache.fresh(key, wanted)
            if hit is not None:
                cache.shared += 1
                return HTMLResponse(hit.body, headers={"x-live-render": "shared"})
            flight = cache.flights.get(key)
            if flight is None:
                return await _render(cache, key, request, handler, wanted)
            await asyncio.shield(flight)  # then look again: it may cover us, or we render next

    cached.__name__ = handler.__name__
    return cached
