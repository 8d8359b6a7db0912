"""Live refreshes of one page at one revision are rendered once, however many tabs ask.

When an event arrives, every open tab showing a page re-fetches it (header `X-Live: 1`). Those
fetches are keyed by (URL, the hub's revision before rendering): the first renders, the others
get its bytes. Only while the hub follows the daemon (so its revision is current), only for
live refreshes (a navigation always renders afresh), only when the hub has reached the
revision the page asks for (`X-Revision`, its last event id) and only successful pages.
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
        wanted = request.headers.get("x-revision", "")
        if (request.headers.get("x-live") != "1" or not hub.connected or hub.revision is None
                or (wanted.isdigit() and int(wanted) > hub.revision)):  # the page knows of newer
            return await handler(request)
        pages: OrderedDict[tuple[str, int], bytes] = request.app.state.page_cache
        key = (str(request.url.path) + "?" + request.url.query, hub.revision)
        body = pages.get(key)
        if body is not None:
            pages.move_to_end(key)
            return HTMLResponse(body)
        response = await handler(request)
        if response.status_code == 200:
            pages[key] = bytes(response.body)
            while len(pages) > MAX_PAGES:
                pages.popitem(last=False)
        return response

    cached.__name__ = handler.__name__
    return cached
