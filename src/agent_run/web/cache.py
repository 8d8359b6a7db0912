"""Live refreshes of one page at one revision are rendered once, however many tabs ask.

When an event arrives, every open tab showing a page re-fetches it (header `X-Live: 1`,
`X-Revision`: the id of the event it got). The last render of each URL is kept with the hub's
revision from before it was rendered; a refresh asking for a revision no newer than that gets
those bytes, anything else renders afresh. Only while the hub follows the daemon (so its
revision is current), only for live refreshes (a navigation always renders afresh, and
re-verifies the answer) and only successful pages.
"""

from collections import OrderedDict
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

MAX_PAGES = 128
Handler = Callable[[Request], Awaitable[Response]]


def live_cached(handler: Handler) -> Handler:
    async def cached(request: Request) -> Response:
        hub = request.app.state.hub
        if request.headers.get("x-live") != "1" or not hub.connected or hub.revision is None:
            return await handler(request)
        wanted = request.headers.get("x-revision", "")
        wanted_revision = int(wanted) if wanted.isdigit() else hub.revision
        pages: OrderedDict[str, tuple[int, bytes]] = request.app.state.page_cache
        key = str(request.url.path) + "?" + request.url.query
        hit = pages.get(key)
        if hit is not None and hit[0] >= wanted_revision:
            pages.move_to_end(key)
            return HTMLResponse(hit[1])
        started_at = hub.revision  # what is rendered now is at least this new
        response = await handler(request)
        if response.status_code == 200 and (hit is None or hit[0] < started_at):
            pages[key] = (started_at, bytes(response.body))
            pages.move_to_end(key)
            while len(pages) > MAX_PAGES:
                pages.popitem(last=False)
        return response

    cached.__name__ = handler.__name__
    return cached
