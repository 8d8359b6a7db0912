"""Resuming a finished standalone agent from its Agent page in a real browser (Debian's chromium
through Playwright): with JS, the new turn streams into the session after the form's redirect;
with JS off, the form posts, redirects, and a reload shows the new turn."""

import pytest

from tests.browser_harness import browser_page, screenshot, sign_in
from tests.harness import wait_for
from tests.test_web_browser_session import shown_ids, stored_ids

pytestmark = pytest.mark.browser

SLOW_TURN = "steps: 8\nstep_seconds: 1.5\nanswer: turn two is done"  # 12 s: a slow page still sees it mid-turn


def settled_agent(daemon, workdir) -> str:
    agent = daemon.call("start", {"task": "answer: turn one", "workdir": str(workdir)})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 120})
    return agent["id"]


def turn_two(page) -> dict:
    """How far the page shows turn 2: its heading, its messages, its answer."""
    return page.evaluate(
        """() => {
          const blocks = [...document.querySelectorAll('#transcript [data-block]')];
          const second = blocks.filter(b => b.dataset.turn === '2');
          return {heading: !!document.querySelector("h3.turn") &&
                    [...document.querySelectorAll('h3.turn')].some(h => h.textContent === 'Turn 2'),
                  items: second.reduce((n, b) => n + b.querySelectorAll('[data-item]').length, 0),
                  answered: (document.querySelector('.answer') || {innerText: ''})
                    .innerText.includes('turn two is done')};
        }"""
    )


def test_resume_from_the_agent_page_streams_the_new_turn(web, daemon, workdir):
    agent_id = settled_agent(daemon, workdir)
    with browser_page() as (page, seen):
        sign_in(page, web, f"/agents/{agent_id}")
        page.wait_for_selector(".answer:has-text('turn one')")
        assert page.locator("#steer").count() == 0  # settled: resume is offered, steer is not
        page.fill("#resume", SLOW_TURN)  # a textarea: one directive a line
        with page.expect_navigation():
            page.click("button:text('Resume')")
        assert page.url == f"{web.base}/agents/{agent_id}"  # post, then 303 back to the page
        page.evaluate("window.__notReloaded = true")
        page.wait_for_selector("#live-status[data-state=live]")
        # Streaming: the page shows turn 2 begun but not yet answered, then its answer, live.
        wait_for(
            lambda: (lambda t: t["heading"] and t["items"] >= 2 and not t["answered"])(
                turn_two(page)
            ),
            timeout=90,
            what=f"turn 2 streaming in ({turn_two(page)}, {seen})",
        )
        partial = turn_two(page)["items"]
        page.wait_for_selector(".answer:has-text('turn two is done')", timeout=90_000)
        assert turn_two(page)["items"] > partial
        final = stored_ids(daemon, agent_id)
        wait_for(lambda: shown_ids(page) == final, timeout=30, what="the page to match the store")
        assert page.locator("h3.turn").count() == 2
        # Each turn opens with what it was started with: the task, then the resume's prompt.
        page.click("details.turn-prompt[data-turn='1'] summary")  # the task: folded at first
        assert "turn one" in page.inner_text("details.turn-prompt[data-turn='1']")
        assert "turn two is done" in page.inner_text("details.turn-prompt[data-turn='2']")
        screenshot(page, "agent-resumed")
        assert page.evaluate("window.__notReloaded") is True
        assert page.locator("#steer").count() == 0 and page.locator("#resume").count() == 1
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen


def test_resume_with_javascript_off_posts_redirects_and_shows_the_new_turn(web, daemon, workdir):
    agent_id = settled_agent(daemon, workdir)
    with browser_page(javascript=False) as (page, seen):
        sign_in(page, web, f"/agents/{agent_id}")
        assert page.inner_text("#live-status") == "static"  # no script ran
        page.fill("#resume", "steps: 2\nanswer: turn two, no script")
        with page.expect_navigation():
            page.click("button:text('Resume')")
        assert page.url == f"{web.base}/agents/{agent_id}"
        daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 120})
        assert daemon.call("agent", {"agent_id": agent_id})["state"] == "succeeded"
        page.reload()  # without JS the page is current when loaded: a reload shows the turn
        assert page.locator("h3.turn:text('Turn 2')").count() == 1
        assert "turn two, no script" in page.inner_text(".answer")
        assert shown_ids(page) == stored_ids(daemon, agent_id)
        assert page.inner_text("#live-status") == "static"
        assert not seen["dialogs"] and not seen["page_errors"], seen
