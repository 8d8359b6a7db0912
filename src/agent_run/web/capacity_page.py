"""The Capacity page (GET /capacity): every window's reading (`limits`) and the routes ranked for
new work (`capacity_order`), server-rendered from those two tool calls; no provider is asked."""

import asyncio

from starlette.requests import Request
from starlette.responses import HTMLResponse

from agent_run.web.pages import page, proxy


async def capacity_page(request: Request) -> HTMLResponse:
    limits, order = await asyncio.gather(
        proxy(request).call("limits", {}), proxy(request).call("capacity_order", {})
    )
    return page(request, "capacity.html", limits=limits, order=order, watch="")
