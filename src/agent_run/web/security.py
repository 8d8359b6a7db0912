"""The web front-end's guard: Host pinning, the token/cookie exchange, Origin and CSRF checks, CSP.

A local server that can start agents is a target for DNS rebinding (a foreign page whose name
resolves to 127.0.0.1) and CSRF (a foreign page posting a form here). Every request must name
this server in `Host`; every request needs the token (the printed URL's `?token=`, exchanged
once for an HttpOnly SameSite=Strict cookie) or `Authorization: Bearer <token>`; every
state-changing request with the cookie also needs a same-origin `Origin` (when sent) and the
CSRF token (form field `csrf` or header `X-CSRF-Token`).
"""

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_run.system.home import Home

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def token_path(home: Home) -> Path:
    return home.root / "web.token"


def load_or_make_token(home: Home) -> str:
    """The home's web token (0600), made once: a restarted `agent-run web` keeps open pages signed in."""
    path = token_path(home)
    try:
        token = path.read_text().strip()
        if len(token) >= 32:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


class Guard:
    """The secrets of one server: the token, the CSRF token derived from it, the allowed hosts."""

    def __init__(self, token: str, port: int) -> None:
        self.token = token
        self.port = port
        self.csrf = hmac.new(token.encode(), b"csrf", hashlib.sha256).hexdigest()
        self.cookie = f"agent_run_web_{port}"
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self.origins = {f"http://{h}" for h in self.hosts}

    def token_ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    def csrf_ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.csrf.encode())


class GuardMiddleware:
    """Refuses what the guard does not allow; adds the security headers to every answer."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.check(scope)
        if refusal is not None:
            await with_headers(refusal)(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                headers.extend((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items())
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def check(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        guard = self.guard
        if headers.get("host") not in guard.hosts:
            return PlainTextResponse(
                "400: this server answers only to 127.0.0.1 or localhost on its port",
                status_code=400,
            )
        query = dict(parse_qsl(scope.get("query_string", b"").decode()))
        if "token" in query and scope["method"] == "GET":
            if not guard.token_ok(query.pop("token")):
                return PlainTextResponse("401: bad token", status_code=401)
            return self._exchange(scope["path"], query)
        bearer = headers.get("authorization", "")
        by_header = bearer.startswith("Bearer ") and guard.token_ok(bearer[len("Bearer ") :])
        by_cookie = guard.token_ok(_cookie(headers, guard.cookie))
        if scope["path"].startswith("/static/") and scope["method"] in SAFE_METHODS:
            return None  # CSS and JS of the package: no secret there, and no state to change
        if not (by_header or by_cookie):
            return PlainTextResponse(
                "401: open the URL that `agent-run web` printed (it carries the token)",
                status_code=401,
            )
        if scope["method"] in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is not None and origin not in guard.origins:
            return PlainTextResponse("403: foreign Origin", status_code=403)
        state = scope.setdefault("state", {})
        if by_header:
            state["csrf_ok"] = (
                True  # a browser cannot send Authorization cross-site without CORS consent
            )
            return None
        if origin is None:
            return PlainTextResponse("403: no Origin on a state-changing request", status_code=403)
        if headers.get("x-csrf-token") is not None:
            if not guard.csrf_ok(headers.get("x-csrf-token")):
                return PlainTextResponse("403: bad CSRF token", status_code=403)
            state["csrf_ok"] = True
        return None  # a form post: its `csrf` field is checked by `checked_form` after parsing

    def _exchange(self, path: str, query: dict[str, str]) -> Response:
        target = path + (f"?{urlencode(query)}" if query else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            self.guard.cookie,
            self.guard.token,
            httponly=True,
            samesite="strict",
            path="/",
            max_age=30 * 86400,
        )
        return response


def _cookie(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


async def checked_form(request: Request) -> dict[str, str]:
    """The posted form, after its CSRF token is checked (403 otherwise)."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not request.scope.get("state", {}).get("csrf_ok"):
        if not request.app.state.guard.csrf_ok(fields.get("csrf")):
            raise HTTPException(403, "403: missing or bad CSRF token")
    fields.pop("csrf", None)
    return fields


def require_csrf(request: Request) -> None:
    """For JSON posts: the X-CSRF-Token header (or bearer auth) must have been checked."""
    if not request.scope.get("state", {}).get("csrf_ok"):
        raise HTTPException(403, "403: missing X-CSRF-Token header")


def with_headers(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response
