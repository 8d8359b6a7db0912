"""The pages no other browser scenario shows, in a real browser (Debian's chromium through
Playwright), each checked for what a person sees there and saved as a screenshot: the clean-up
preview (a dirty worktree kept until forced), a run's Merge dry run, an agent whose completion
notice was delivered, the Start agent form's notice fields, and the Capacity page with the
route order of a real `command` collector."""

import sys
from pathlib import Path

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, screenshot, sign_in
from tests.harness import DaemonProcess, make_home, remove_home, wait_for
from tests.test_capacity_sources import EXPLAINED_RUNTIMES, _collector_config
from tests.web_harness import WebProcess

pytestmark = pytest.mark.browser


def test_clean_up_merge_and_a_delivered_notice(web, daemon, workdir, tmp_path):
    batch = wait_batch(
        daemon,
        daemon.call(
            "batch_start",
            {
                "workflow": "ranked",
                "project": str(make_repo()),
                "runs": 2,
                "reviewers": 1,
                "prompt": "write: NOTES.md = notes\ncommit: Add notes\nanswer: added notes",
                "review_prompt": "score: auto",
            },
        )["id"],
    )
    assert batch["state"] == "completed", batch["state_reason"]
    winner = next(r for r in batch["runs"] if r["rank"] == 1)
    other = next(r for r in batch["runs"] if r["rank"] == 2)
    (Path(other["worktree"]) / "scratch.txt").write_text("not committed\n")
    got = tmp_path / "notice.json"
    script = f"import sys; open({str(got)!r}, 'w').write(sys.stdin.read())"
    with browser_page() as (page, seen):
        sign_in(page, web, f"/batches/{batch['id']}/clean")
        row = page.locator(f"tr:has(td.path:text-is('{other['worktree']}'))")
        assert row.locator("td").last.inner_text() == "needs_force"
        assert "scratch.txt" in row.inner_text()
        screenshot(page, "clean-preview")
        page.goto(f"{web.base}/batches/{batch['id']}/runs/{winner['id']}/merge")
        assert "Dry run" in page.inner_text("#merge-result")
        assert page.locator("#merge-form button").count() == 1
        screenshot(page, "merge")
        page.goto(f"{web.base}/agents/new")
        page.fill("#f-task", "answer: tell me when done")
        page.fill("#f-workdir", str(workdir))
        page.select_option("#f-notify_transport", "command")
        page.fill("#f-notify_argv", f"{sys.executable}\n-c\n{script}")
        screenshot(page, "start-agent-notice")
        page.click("button.primary")
        page.wait_for_url("**/agents/ag_*")
        page.evaluate("window.__notReloaded = true")
        page.wait_for_selector("#notice[data-state=delivered]", timeout=90_000)  # live
        assert page.evaluate("window.__notReloaded") is True
        assert got.exists() and "1 attempt" in page.inner_text("#notice")
        screenshot(page, "agent-notice")
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen


def test_the_capacity_page(tmp_path):
    home = make_home(_collector_config("ok", tmp_path / "runs.txt"))
    daemon = DaemonProcess(home, env={"ALPHA_KEY": "key-a", "BETA_KEY": "key-b"}).start()
    web = None
    try:
        daemon.call("capacity_collect", {})
        web = WebProcess(home).start()
        with browser_page() as (page, seen):
            sign_in(page, web, "/")
            page.click("header nav a:text('Capacity')")
            wait_for(lambda: page.url.endswith("/capacity"), what="the Capacity page")
            routes = page.locator(
                "table.capacity-routes tbody tr td:nth-child(2)"
            ).all_inner_texts()
            assert routes[:2] == ["beta/-/default", "alpha/-/default"], routes
            assert page.locator("table.capacity-limits tbody tr").count() >= 2
            screenshot(page, "capacity")
            assert not seen["page_errors"] and not seen["console_errors"], seen
    finally:
        if web is not None:
            web.stop()
        daemon.stop()
        remove_home(home)


def test_the_capacity_page_explains_each_route(tmp_path):
    """Credits, a pool's aliases, each window's marker and the label of each set-aside route,
    as a browser shows them, wide and at a phone's width."""
    config = _collector_config("explained", tmp_path / "runs.txt", extra=EXPLAINED_RUNTIMES)
    home = make_home(config)
    daemon = DaemonProcess(home, env={"ALPHA_KEY": "key-a", "BETA_KEY": "key-b"}).start()
    web = None
    try:
        daemon.call("capacity_collect", {})
        web = WebProcess(home).start()
        for width in (1200, 390):
            with browser_page(width=width) as (page, seen):
                sign_in(page, web, "/capacity")
                row = page.locator("table.capacity-routes tbody tr")
                assert row.count() == 1
                assert row.locator("td.aliases").inner_text() == (
                    "gamma/- (weight 2), alpha/- (weight 1)"
                )
                assert row.locator("td.credits").inner_text() == "2 (× 1.67)"
                markers = row.locator("ul.windows li").evaluate_all(
                    "items => items.map(li => li.dataset.marker)"
                )
                assert markers == ["projected", "warmup"], markers
                labels = page.locator("ul.set-aside .label").all_inner_texts()
                assert labels == ["exhausted", "stale_sample"], labels
                assert "never ranked" in page.locator("ul.unusable").inner_text()
                fits = page.evaluate(
                    "() => document.documentElement.scrollWidth <= window.innerWidth"
                )
                assert fits, f"the page scrolls sideways at {width} px"
                screenshot(page, f"capacity-explained-{width}")
                assert not seen["page_errors"] and not seen["console_errors"], seen
    finally:
        if web is not None:
            web.stop()
        daemon.stop()
        remove_home(home)
