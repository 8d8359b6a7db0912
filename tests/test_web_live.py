"""Live refreshes are cheap: many tabs share one render of a page, and the Session follows the
transcript by cursor (`/agents/<id>/transcript?after=`), against a real daemon and web process."""

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx2

from tests.harness import cli, wait_for


def follow_events(web, until):
    """Hold `/events` open (the hub follows the daemon while a stream is open) until `until` is set;
    collect the ids of the events it got."""
    ids: list[int] = []
    opened = threading.Event()

    def listen():
        try:
            with web.client().stream("GET", "/events") as response:
                for event in _events(response):
                    ids.append(int(event["id"]))
                    opened.set()
                    if until.is_set():
                        return
        except httpx2.TransportError:  # the web process stopped at the end of the test
            pass

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert opened.wait(30), "no hello event"
    return ids


def _events(response):
    current: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "id" in current:
                yield current
            current = {}
        elif not line.startswith(":") and ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip()


def live_get(web, path, revision):
    client = web.client()
    try:
        response = client.get(path, headers={"x-live": "1", "x-revision": str(revision)})
    finally:
        client.close()
    assert response.status_code == 200, response.text
    return response


def test_twenty_tabs_refreshing_one_page_at_once_share_one_render(web, daemon, workdir):
    agent = daemon.call("start", {"task": "answer: shared", "workdir": str(workdir)})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    done = threading.Event()
    follow_events(web, done)
    revision = daemon.call("changes", {"after_revision": 0})["revision"]
    barrier = threading.Barrier(20)

    def tab(_n):
        client = web.client()
        try:
            barrier.wait()
            return client.get("/", headers={"x-live": "1", "x-revision": str(revision)})
        finally:
            client.close()

    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(tab, range(20)))
    done.set()
    assert all(r.status_code == 200 and agent["id"] in r.text for r in responses)
    kinds = [r.headers.get("x-live-render") for r in responses]
    assert kinds.count("rendered") == 1 and kinds.count("shared") == 19, kinds
    assert len({r.text for r in responses}) == 1


def test_a_refresh_for_a_newer_revision_renders_afresh_and_shows_the_change(web, daemon, workdir):
    done = threading.Event()
    ids = follow_events(web, done)
    before = daemon.call("changes", {"after_revision": 0})["revision"]
    first = live_get(web, "/", before)
    assert live_get(web, "/", before).headers["x-live-render"] == "shared"
    agent = daemon.call("start", {"task": "answer: newer", "workdir": str(workdir)})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    after = daemon.call("changes", {"after_revision": 0})["revision"]
    wait_for(lambda: ids and ids[-1] >= after, what="the event for the new agent")
    done.set()
    fresh = live_get(web, "/", ids[-1])
    assert fresh.headers["x-live-render"] == "rendered" and agent["id"] in fresh.text
    assert agent["id"] not in first.text
    navigation = web.client().get("/")  # not a live refresh: always rendered, never cached
    assert "x-live-render" not in navigation.headers


ITEM = re.compile(r'data-item="(\d+)"')
BLOCK = re.compile(
    r'<div class="block" data-block data-kind="(\w+)" data-turn="(\d+)" '
    r'data-after="(\d+)" data-last="(\d+)">'
)


def test_the_transcript_endpoint_answers_only_the_blocks_after_the_cursor(web, daemon, workdir):
    task = "steps: 3\nstep_seconds: 0.05\nwrite: a.txt = 1\nwrite: b.txt = 2\nanswer: first"
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    daemon.call(
        "resume",
        {"agent_id": agent["id"], "prompt": "steps: 2\nstep_seconds: 0.05\nanswer: second"},
    )
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    stored = [
        i["id"]
        for i in daemon.call("transcript", {"agent_id": agent["id"], "limit": 1000})["items"]
    ]
    client = web.client()
    page = client.get(f"/agents/{agent['id']}").text
    assert [int(i) for i in ITEM.findall(page)] == stored
    blocks = BLOCK.findall(page)
    assert [kind for kind, *_ in blocks].count("tools") >= 1 and page.count('class="turn"') == 2

    def after(cursor, turn=0):
        response = client.get(
            f"/agents/{agent['id']}/transcript", params={"after": cursor, "turn": turn}
        )
        assert response.status_code == 200
        return response.json()

    everything = after(0)
    assert [int(i) for i in ITEM.findall(everything["html"])] == stored and everything[
        "cursor"
    ] == stored[-1]
    assert everything["more"] is False and everything["count"] == len(stored)
    # From each block's start (a tool group asks from its start): exactly the items from there on.
    for n, (_kind, _turn, start, _last) in enumerate(blocks):
        previous_turn = blocks[n - 1][1] if n else "0"
        rest = after(int(start), int(previous_turn))
        assert [int(i) for i in ITEM.findall(rest["html"])] == [i for i in stored if i > int(start)]
        turns = [previous_turn] + [b[1] for b in blocks[n:]]
        dividers = sum(1 for a, b in zip(turns, turns[1:], strict=False) if a != b)
        assert rest["html"].count('class="turn"') == dividers
    nothing = after(stored[-1], 2)
    assert nothing == {"html": "", "cursor": stored[-1], "more": False, "count": 0}
    bad = client.get(f"/agents/{agent['id']}/transcript", params={"after": "-1"})
    assert bad.status_code == 400 and "after" in bad.text


def test_a_live_refresh_of_an_agent_page_does_not_read_the_transcript(web, daemon, workdir):
    agent = daemon.call(
        "start", {"task": "steps: 2\nstep_seconds: 0.05\nanswer: live", "workdir": str(workdir)}
    )
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    done = threading.Event()
    follow_events(web, done)
    live = live_get(
        web, f"/agents/{agent['id']}", daemon.call("changes", {"after_revision": 0})["revision"]
    )
    done.set()
    assert ITEM.search(live.text) is None  # the page follows the transcript itself
    assert f'data-agent="{agent["id"]}"' in live.text and "verified" in live.text
    assert live.headers["x-live-render"] == "rendered"


def test_a_quiet_event_stream_gets_a_keep_alive_comment(daemon):
    """With nothing changing, `/events` sends `: keep-alive` after `--keep-alive` seconds (15 by
    default), so proxies and the browser keep a quiet stream open; nothing else is sent
    meanwhile."""
    import time

    from tests.web_harness import WebProcess

    quiet = 2.0
    web = WebProcess(daemon.home, args=("--keep-alive", str(quiet))).start()
    lines, hello_at, alive_at = [], None, None
    try:
        with web.client().stream("GET", "/events") as response:
            for line in response.iter_lines():
                lines.append(line)
                if line.startswith("event: hello"):
                    hello_at = time.monotonic()
                elif line == ": keep-alive":
                    alive_at = time.monotonic()
                    break
    finally:
        web.stop()
    assert hello_at is not None and alive_at is not None, lines
    assert quiet - 0.5 <= alive_at - hello_at <= quiet * 10, lines
    assert not any(line.startswith("event: change") for line in lines), lines


def test_a_new_event_stream_says_hello_without_waiting_for_a_change(daemon):
    """On a quiet daemon the first `/events` stream says hello as soon as the hub knows the
    revision, not when its first long-poll (LONG_POLL_SECONDS, 15 s) comes back empty: a new
    tab shows "live" at once."""
    import time

    from agent_run.web.hub import LONG_POLL_SECONDS
    from tests.web_harness import WebProcess

    web = WebProcess(daemon.home, args=("--keep-alive", "600")).start()
    try:
        opened = time.monotonic()
        with web.client().stream("GET", "/events") as response:
            for line in response.iter_lines():
                if line.startswith("event: hello"):
                    break
        waited = time.monotonic() - opened
    finally:
        web.stop()
    assert waited < LONG_POLL_SECONDS - 5, waited


def test_keep_alive_seconds_out_of_range_is_a_usage_error_naming_the_option(home):
    result = cli(home, "web", "--keep-alive", "0")
    assert result.returncode == 64, result
    error = json.loads(result.stdout or result.stderr)["error"]
    assert error["field"] == "keep_alive" and "--keep-alive" in error["message"]
