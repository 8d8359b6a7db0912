"""The Session tab follows a long-running agent's transcript by cursor in a real browser (Debian's
chromium through Playwright): new messages are appended, and after the web process is killed and
restarted the page catches up from its cursor; none is duplicated or missed (compared with the store)."""

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser_harness import browser_page, sign_in
from tests.harness import wait_for
from tests.test_web_browser import free_port
from tests.web_harness import WebProcess

pytestmark = pytest.mark.browser

# It steps until the test drops done.flag in its folder, however slow the machine is.
LONG = (
    "steps: 3000\nstep_seconds: 0.2\nuntil: done.flag\n"
    "write: notes.txt = one\nwrite: more.txt = two\nanswer: the long one is done"
)


def stored_ids(daemon, agent_id):
    items, cursor = [], 0
    while True:
        page = daemon.call("transcript", {"agent_id": agent_id, "cursor": cursor, "limit": 1000})
        items += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if len(page["items"]) < 1000:
            return items


def shown_ids(page):
    return page.eval_on_selector_all(
        "#transcript [data-item]", "els => els.map(e => Number(e.dataset.item))"
    )


def test_a_long_running_agents_session_appends_by_cursor_across_a_web_restart(daemon, workdir):
    agent = daemon.call("start", {"task": LONG, "workdir": str(workdir)})
    agent_id = agent["id"]
    wait_for(lambda: len(stored_ids(daemon, agent_id)) >= 3, timeout=60, what="the first messages")
    web = WebProcess(daemon.home, port=free_port()).start()
    asked: list[dict[str, list[str]]] = []
    try:
        with browser_page() as (page, seen):
            page.on(
                "request",
                lambda r: (
                    asked.append(parse_qs(urlsplit(r.url).query))
                    if "/transcript?" in r.url
                    else None
                ),
            )
            sign_in(page, web, f"/agents/{agent_id}")
            page.wait_for_selector("#live-status[data-state=live]")
            at_load = len(shown_ids(page))
            assert daemon.call("agent", {"agent_id": agent_id})["state"] == "running"
            wait_for(
                lambda: len(shown_ids(page)) >= at_load + 3,
                timeout=60,
                what=f"messages appended live (asked {asked}, {seen})",
            )
            web.kill9()
            page.wait_for_selector("#live-status[data-state=reconnecting]")
            away_from = len(stored_ids(daemon, agent_id))
            wait_for(
                lambda: len(stored_ids(daemon, agent_id)) >= away_from + 5,
                timeout=60,
                what="messages made while the web process is down",
            )
            web = WebProcess(daemon.home, port=web.port).start()
            (workdir / "done.flag").touch()
            daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 120})
            page.wait_for_selector(".answer:has-text('the long one is done')", timeout=60_000)
            final = stored_ids(daemon, agent_id)
            wait_for(
                lambda: shown_ids(page) == final, timeout=30, what="the page to match the store"
            )
            # A new turn: its divider and messages are appended too, still exactly the store's.
            daemon.call(
                "resume",
                {"agent_id": agent_id, "prompt": "steps: 3\nstep_seconds: 0.1\nanswer: turn two"},
            )
            daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 120})
            page.wait_for_selector("h3.turn:text('Turn 2')", timeout=60_000)
            final = stored_ids(daemon, agent_id)
            wait_for(
                lambda: shown_ids(page) == final, timeout=30, what="the second turn on the page"
            )
            assert page.locator("h3.turn").count() == 2
            assert page.evaluate("window.__notReloaded") is True
            assert not seen["dialogs"] and not seen["page_errors"], seen
    finally:
        web.stop()
    # Never re-read from the start: every follow asked after a cursor the page already had.
    assert asked and all(int(q["after"][0]) > 0 for q in asked), asked
