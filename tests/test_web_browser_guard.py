"""The web UI's guard in a real browser (Debian's chromium through Playwright): a foreign page
(a second local HTTP server on another port, and one on another site) that tries to act on the
web UI is refused, a DNS-rebinding name (`evil.test`, mapped to 127.0.0.1 by chromium's
`--host-resolver-rules`) gets 400, and a browser without the token gets 401. The store's
revision proves nothing was written."""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.browser_harness import browser_page, sign_in

pytestmark = pytest.mark.browser

REBIND = "evil.test"
ATTACKER_JS = """
async function probe(url, init) {
  try { const r = await fetch(url, init); return r.type + ' ' + r.status; }
  catch (e) { return 'refused by the browser: ' + e.name; }
}
async function probes(web, body) {
  return {
    api_simple: await probe(web + '/api/tools/start', {method: 'POST', mode: 'no-cors',
      credentials: 'include', headers: {'Content-Type': 'text/plain'}, body: body}),
    api_json: await probe(web + '/api/tools/start', {method: 'POST', credentials: 'include',
      headers: {'Content-Type': 'application/json', 'X-CSRF-Token': 'guessed'}, body: body}),
    read_home: await probe(web + '/', {credentials: 'include'}),
  };
}
"""


def attacker_page(web: Any, task: str, workdir: str, agent_id: str) -> bytes:
    """A page that posts a Start agent form and a Resume form to the web UI (not submitted until
    the test says so) and carries fetch probes."""
    return f"""<!doctype html><title>a foreign page</title>
<form id="start" method="post" action="{web.base}/agents">
<input name="task" value="{task}"><input name="workdir" value="{workdir}"></form>
<form id="resume" method="post" action="{web.base}/agents/{agent_id}/resume">
<input name="prompt" value="{task}"></form>
<script>{ATTACKER_JS}</script>""".encode()


@contextmanager
def foreign_site(body: bytes) -> Iterator[int]:
    """A second local HTTP server on its own port serving `body` at every path; yields the port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server protocol)
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def answers_from(page: Any, port: int) -> list[tuple[str, str, int]]:
    """Every answer the web UI gave this page: (method, path, status), network-level (an opaque
    or CORS-refused answer's real status too)."""
    seen: list[tuple[str, str, int]] = []

    def record(response: Any) -> None:
        url = response.url
        if f":{port}/" in url:
            path = "/" + url.split(f":{port}/", 1)[1]
            seen.append((response.request.method, path, response.status))

    page.on("response", record)
    return seen


def submit(page: Any, form_id: str) -> Any:
    with page.expect_navigation() as navigation:
        page.evaluate(f"document.getElementById('{form_id}').submit()")
    return navigation.value


def state_of(daemon: Any) -> tuple[int, list[tuple[str, str]]]:
    revision = daemon.call("changes", {"after_revision": 0})["revision"]
    agents = daemon.call("list_agents", {"limit": 100})["items"]
    return revision, sorted((a["id"], a["state"]) for a in agents)


def test_foreign_pages_rebinding_names_and_a_missing_token_are_refused(web, daemon, workdir):
    settled = daemon.call("start", {"task": "answer: settled", "workdir": str(workdir)})
    daemon.call("wait", {"agent_id": settled["id"], "timeout_seconds": 120})
    before = state_of(daemon)
    task = "answer: planted by a foreign page"
    body = json.dumps({"task": task, "workdir": str(workdir)})
    html = attacker_page(web, task, str(workdir), settled["id"])
    rules = f"--host-resolver-rules=MAP {REBIND} 127.0.0.1"
    with foreign_site(html) as other, browser_page(args=(rules,)) as (page, _seen):
        answers = answers_from(page, web.port)
        sign_in(page, web)  # the victim is signed in: this browser holds the web UI's cookie

        # Same site, another port: the cookie goes along (SameSite ignores ports), the Origin is
        # foreign: 403 for the simple POST; the JSON one never passes the preflight (401, no
        # cookie on an OPTIONS); the page cannot read a page of the web UI (no CORS).
        page.goto(f"http://127.0.0.1:{other}/")
        probes = page.evaluate("([web, body]) => probes(web, body)", [web.base, body])
        assert probes["api_simple"] == "opaque 0", probes
        assert probes["api_json"].startswith("refused by the browser"), probes
        assert probes["read_home"].startswith("refused by the browser"), probes
        assert ("POST", "/api/tools/start", 403) in answers, answers
        assert not [a for a in answers if a[:2] == ("POST", "/api/tools/start") and a[2] < 400]
        for form in ("start", "resume"):
            page.goto(f"http://127.0.0.1:{other}/")
            response = submit(page, form)
            assert response.status == 403, (form, response.status)
            assert "foreign Origin" in page.inner_text("body")

        # Another site (a name mapped to 127.0.0.1): the SameSite=Strict cookie stays home: 401.
        page.goto(f"http://{REBIND}:{other}/")
        response = submit(page, "start")
        assert response.status == 401, response.status

        # DNS rebinding: the web UI's own port under a foreign name is 400, token or not, and a
        # same-origin call from such a page (what a rebinding attack makes) is 400 too.
        for path in ("/", f"/?token={web.token}", "/agents/new"):
            response = page.goto(f"http://{REBIND}:{web.port}{path}")
            assert response.status == 400, (path, response.status)
            assert "set-cookie" not in response.headers
        same_origin = page.evaluate(
            "(body) => fetch('/api/tools/start', {method: 'POST', body: body, "
            "headers: {'Content-Type': 'application/json'}}).then(r => r.status)",
            body,
        )
        assert same_origin == 400

        # No token: a browser without the cookie gets 401 on pages and posts alike.
        page.context.clear_cookies()
        for path in ("/", "/agents/new", f"/agents/{settled['id']}", "/events"):
            response = page.goto(f"{web.base}{path}")
            assert response.status == 401, (path, response.status)
        page.goto(f"http://127.0.0.1:{other}/")
        assert submit(page, "resume").status == 401
        assert page.goto(f"{web.base}/?token=not-the-token").status == 401
    assert state_of(daemon) == before  # nothing was written: same revision, same agents
