"""`agent-run web` refuses what could be DNS rebinding or CSRF, and escapes everything agent-made."""

import re
from pathlib import Path

from tests.harness import wait_for

PAGES = ["/", "/agents/new", "/batches/new"]


def test_the_token_becomes_an_httponly_samesite_strict_cookie_and_leaves_the_url(web):
    client = web.client(signed_in=False)
    response = client.get(f"/agents/new?token={web.token}&x=1")
    assert response.status_code == 303
    assert response.headers["location"] == "/agents/new?x=1"
    cookie = response.headers["set-cookie"]
    assert f"{web.cookie}={web.token}" in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert client.get("/agents/new").status_code == 200
    assert web.output[0].strip().endswith(web.token) and len(web.output) == 1  # printed once
    bad = web.client(signed_in=False).get("/?token=wrong")
    assert bad.status_code == 401 and "set-cookie" not in bad.headers
    token_file = web.home.root / "web.token"
    assert (
        token_file.stat().st_mode & 0o777 == 0o600 and token_file.read_text().strip() == web.token
    )


def test_it_listens_on_127_0_0_1_only(web):
    def listening(table_path):
        with open(table_path) as table:
            rows = [line.split() for line in table.read().splitlines()[1:]]
        return [r[1] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == web.port]

    assert listening("/proc/net/tcp") == [f"0100007F:{web.port:04X}"]  # 127.0.0.1, not 0.0.0.0
    if Path("/proc/net/tcp6").exists():
        assert listening("/proc/net/tcp6") == []  # and no IPv6 listener (::, ::1) beside it


def test_a_foreign_host_is_refused_with_400_even_with_the_token(web):
    client = web.client()
    for host in (
        "evil.example",
        f"evil.example:{web.port}",
        f"127.0.0.1:{web.port + 1}",
        "127.0.0.1",
    ):
        assert client.get("/", headers={"host": host}).status_code == 400, host
    assert client.get("/", headers={"host": f"localhost:{web.port}"}).status_code == 200


def test_without_the_token_every_page_api_and_stream_is_401(web):
    anonymous = web.client(signed_in=False)
    for path in [
        *PAGES,
        "/events",
        "/api/tools",
        "/agents/ag_x",
        "/agents/ag_x/transcript?after=0",
    ]:
        assert anonymous.get(path).status_code == 401, path
    assert anonymous.post("/api/tools/list_agents", json={}).status_code == 401
    forged = web.client(signed_in=False, cookies={web.cookie: "not-the-token"})
    assert forged.get("/").status_code == 401
    assert anonymous.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert anonymous.get("/", headers={"authorization": f"Bearer {web.token}"}).status_code == 200


def test_state_changing_requests_need_our_origin_and_the_csrf_token(web, daemon, workdir):
    client = web.client()
    csrf = web.csrf(client)
    form = {"task": "answer: from a form", "workdir": str(workdir), "csrf": csrf}
    refused = [
        client.post("/agents", data=form, headers={"origin": "http://evil.example"}),
        client.post("/agents", data=form, headers={"origin": f"http://localhost:{web.port + 1}"}),
        client.post("/agents", data=form),  # no Origin at all
        client.post("/agents", data={**form, "csrf": "0" * 64}, headers={"origin": web.origin}),
        client.post(
            "/agents",
            data={k: v for k, v in form.items() if k != "csrf"},
            headers={"origin": web.origin},
        ),
        client.post("/api/tools/list_agents", json={}, headers={"origin": web.origin}),
        client.post(
            "/api/tools/list_agents", json={}, headers={"origin": web.origin, "x-csrf-token": "bad"}
        ),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert daemon.call("list_agents", {})["total"] == 0  # nothing was started
    ok = client.post("/agents", data=form, headers={"origin": web.origin})
    assert ok.status_code == 303 and ok.headers["location"].startswith("/agents/ag_")
    api = client.post(
        "/api/tools/list_agents", json={}, headers={"origin": web.origin, "x-csrf-token": csrf}
    )
    assert api.status_code == 200 and api.json()["total"] == 1


def test_every_page_has_a_csp_without_inline_script(web, daemon, workdir):
    agent = daemon.call("start", {"task": "answer: hi", "workdir": str(workdir)})
    client = web.client()
    for path in [*PAGES, f"/agents/{agent['id']}", "/agents/ag_missing"]:
        response = client.get(path)
        csp = response.headers["content-security-policy"]
        assert (
            "default-src 'self'" in csp
            and "script-src 'self'" in csp
            and "unsafe-inline" not in csp
        )
        assert response.headers["x-frame-options"] == "DENY"
        scripts = re.findall(r"<script[^>]*>", response.text)
        assert scripts and all('src="/static/' in s for s in scripts), (path, scripts)
        assert not re.search(r"\son[a-z]+=", response.text), path  # no inline event handlers


XSS_SCRIPT = "<script>alert('task')</script>"
XSS_IMG = '<img src=x onerror="alert(1)">'


def test_agent_made_task_and_answer_are_escaped(web, daemon, workdir):
    task = f"# title {XSS_SCRIPT}\n{XSS_IMG}\n[click](javascript:alert(2))\nanswer: {XSS_SCRIPT} {XSS_IMG}"
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    wait_for(
        lambda: daemon.call("agent", {"agent_id": agent["id"]})["state"] == "succeeded",
        what="agent done",
    )
    assert XSS_SCRIPT in daemon.call("answer", {"agent_id": agent["id"]})["text"]
    client = web.client()
    for path in (f"/agents/{agent['id']}", "/"):
        html = client.get(path).text
        assert (
            "<script>alert" not in html
            and "<img src=x" not in html
            and 'href="javascript:' not in html
        )
        assert "&lt;script&gt;alert(" in html or "&lt;script&gt;alert(&#39;task&#39;)" in html, path
    assert "&lt;img src=x onerror=" in client.get(f"/agents/{agent['id']}").text


def test_a_bad_api_body_gets_a_typed_error_and_changes_nothing(web, daemon, workdir):
    """Not JSON, not UTF-8, not an object, a lone surrogate, nesting 100k deep, a field too big
    for one request line, a body past the cap: each a typed error with its status (the socket's
    typed 400s for the surrogate and the nesting, never a 500), and no agent started by any."""
    client = web.client(headers={"authorization": f"Bearer {web.token}"})
    before = daemon.call("list_agents", {})["items"]
    start = "/api/tools/start"
    cases = [
        (b"{not json", 422, "InvalidParams"),
        (b"\xff\xfe{}", 422, "InvalidParams"),
        (b'["answer: x"]', 422, "InvalidParams"),
        (b'"answer: x"', 422, "InvalidParams"),
        (
            ('{"task": "' + "x" * (1024 * 1024 + 10) + f'", "workdir": "{workdir}"}}').encode(),
            413,
            "LineTooLong",
        ),
        (b"{" + b" " * (2 * 1024 * 1024 + 1) + b"}", 413, "LineTooLong"),
        (f'{{"task": "\\ud800", "workdir": "{workdir}"}}'.encode(), 400, "InvalidUnicode"),
        (b'{"task": "x", "tags": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "NestingTooDeep"),
        (b'{"task": "x", "wall_seconds": NaN}', 422, "InvalidParams"),
    ]
    for body, status, code in cases:
        answer = client.post(start, content=body, headers={"content-type": "application/json"})
        assert answer.status_code == status, (body[:20], answer.text[:200])
        assert answer.json()["error"]["code"] == code, answer.text[:200]
    big = client.post(start, content=cases[4][0], headers={"content-type": "application/json"})
    assert big.json()["error"]["field"] == "task"
    assert daemon.call("list_agents", {})["items"] == before
