"""The web front-end's Starlette app (routes, guard, error pages) and `agent-run web` itself.

It binds 127.0.0.1 only, prints its URL with the token once, and serves until stopped. It
holds no state of its own: every page and action is a tool call to the daemon over its socket.
"""

import asyncio
import socket
import sys
import webbrowser
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agent_run.domain.errors import DaemonUnavailable, DomainError
from agent_run.rpc.autostart import connect
from agent_run.system.home import Home
from agent_run.web import (
    DEFAULT_PORT,
    actions,
    api,
    capacity_page,
    live,
    merge_page,
    pages,
    session,
)
from agent_run.web.cache import LiveCache, live_cached
from agent_run.web.hub import ChangeHub
from agent_run.web.proxy import DaemonProxy
from agent_run.web.render import make_env
from agent_run.web.security import Guard, GuardMiddleware, load_or_make_token

STATIC = Path(__file__).parent / "static"


async def domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    if request.url.path.startswith("/api/"):
        return api.error_response(exc.to_data())
    status = (
        503 if isinstance(exc, DaemonUnavailable) else 404 if exc.code.endswith("NotFound") else 400
    )
    return pages.page(request, "error.html", status=status, error=exc.to_data(), watch="")


async def http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code)


def routes() -> list[Route | Mount]:
    post = ["POST"]
    return [
        Route("/", live_cached(pages.home)),
        Route("/agents/new", pages.agent_new),
        Route("/agents", actions.agent_create, methods=post),
        Route("/agents/{agent_id}", live_cached(pages.agent_page)),
        Route("/agents/{agent_id}/transcript", session.transcript_after),
        Route("/agents/{agent_id}/{action}", actions.agent_action, methods=post),
        Route("/batches/new", pages.batch_new),
        Route("/batches/new", pages.batch_new_posted, methods=post),
        Route("/folders", pages.folders),
        Route("/folders", pages.folders_posted, methods=post),
        Route("/batches", actions.batch_create, methods=post),
        Route("/batches/{batch_id}", live_cached(pages.batch_page)),
        Route("/batches/{batch_id}/cancel", actions.batch_cancel, methods=post),
        Route("/batches/{batch_id}/clean", pages.batch_clean_preview),
        Route("/batches/{batch_id}/clean", actions.batch_clean, methods=post),
        Route("/batches/{batch_id}/runs/{run_id}", live_cached(pages.run_page)),
        Route("/batches/{batch_id}/runs/{run_id}/merge", merge_page.merge_preview),
        Route("/batches/{batch_id}/runs/{run_id}/merge", merge_page.merge_apply, methods=post),
        Route("/batches/{batch_id}/runs/{run_id}/{action}", actions.run_action, methods=post),
        Route("/capacity", capacity_page.capacity_page),
        Route("/events", live.events),
        Route("/api/tools", api.list_tools),
        Route("/api/tools/{name}", api.call_tool, methods=post),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


def build_app(
    home: Home, guard: Guard, keep_alive_seconds: float = live.KEEP_ALIVE_SECONDS
) -> Starlette:
    app = Starlette(
        routes=routes(),
        middleware=[Middleware(GuardMiddleware, guard=guard)],
        exception_handlers={DomainError: domain_error, HTTPException: http_error},
    )
    app.state.guard = guard
    app.state.proxy = DaemonProxy(home)
    app.state.hub = ChangeHub(app.state.proxy)
    app.state.live_cache = LiveCache()
    app.state.env = make_env()
    app.state.keep_alive_seconds = keep_alive_seconds  # of quiet before `/events` says so
    return app


def bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        # Taken (another `agent-run web`, another home's, another program): any free port does.
        hint = "; `agent-run web --port 0` picks a free one" if port else ""
        raise SystemExit(
            f"agent-run web: cannot listen on 127.0.0.1:{port}: {exc.strerror}{hint}"
        ) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def run(
    home: Home,
    port: int = DEFAULT_PORT,
    open_browser: bool = False,
    keep_alive_seconds: float = live.KEEP_ALIVE_SECONDS,
) -> None:
    connect(home).close()  # the daemon answers (started when none does) before we offer a URL
    sock = bind(port)
    port = sock.getsockname()[1]
    guard = Guard(load_or_make_token(home), port)
    url = f"http://127.0.0.1:{port}/?token={guard.token}"
    print(f"agent-run web: {url}", flush=True)
    if open_browser:
        webbrowser.open(url)
    config = uvicorn.Config(
        build_app(home, guard, keep_alive_seconds),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    try:
        asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
    except KeyboardInterrupt:
        sys.exit(0)
