"""Acting on runs in a real browser: stop and rerun, a follow-up's new turn streaming in, and a
blocked ranked batch that shows why and unblocks after a rerun."""

from pathlib import Path

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, picker_home, screenshot, sign_in  # noqa: F401 (fixture)
from tests.harness import wait_for

pytestmark = pytest.mark.browser


def start_repeated(daemon, prompt):
    return daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(make_repo()),
            "runs": 1,
            "runtime": "demo",
            "prompt": prompt,
        },
    )


def only_run(daemon, batch_id):
    return daemon.call("batch", {"batch_id": batch_id})["runs"][0]


def test_stop_then_rerun_a_run_from_its_page(web, daemon):
    batch = start_repeated(daemon, "steps: 200\nstep_seconds: 0.2\nanswer: slow")
    wait_for(lambda: only_run(daemon, batch["id"])["state"] == "running", what="the run to run")
    run = only_run(daemon, batch["id"])
    with browser_page() as (page, seen):
        sign_in(page, web, f"/batches/{batch['id']}/runs/{run['id']}")
        assert page.locator("button:text('Rerun')").count() == 0  # not while it runs
        page.click("button:text('Stop')")
        page.wait_for_selector(
            "#run-head h1 .state-cancelled", timeout=60_000
        )  # live, after the redirect
        assert page.locator("button:text('Stop')").count() == 0
        page.click("button:text('Rerun')")
        page.wait_for_selector("a.chip:text('2 · rerun')")
        page.wait_for_selector("#run-head h1 .state-running", timeout=60_000)
        screenshot(page, "run-rerun")
        assert daemon.call("batch", {"batch_id": batch["id"]})["runs"][0]["attempt"] == 2
        page.click("button:text('Stop')")
        assert not seen["dialogs"] and not seen["page_errors"], seen


def test_a_live_refresh_keeps_the_nodes_it_did_not_change(web, daemon):
    """The run's head re-renders while its agent streams; its Stop button stays the same node
    (a click under way is never lost to a refresh) while what changed is brought up to date."""
    batch = start_repeated(daemon, "steps: 3000\nstep_seconds: 0.2\nanswer: slow")
    wait_for(lambda: only_run(daemon, batch["id"])["state"] == "running", what="the run to run")
    run = only_run(daemon, batch["id"])
    with browser_page() as (page, seen):
        sign_in(page, web, f"/batches/{batch['id']}/runs/{run['id']}")
        page.wait_for_selector("#live-status[data-state=live]")
        page.eval_on_selector("#run-head h1", "h => { h.__kept = true; }")
        page.eval_on_selector("button:text('Stop')", "b => { b.__kept = true; }")

        # Each refresh sets the page's revision to the fresh page's: wait for three of them.
        def revision() -> int:
            return int(page.evaluate("document.body.dataset.revision || 0"))

        for _ in range(3):
            before = revision()
            wait_for(lambda b=before: revision() > b, timeout=60, what="a live refresh")
        assert page.eval_on_selector("button:text('Stop')", "b => b.__kept === true")
        daemon.call("run_stop", {"run_id": run["id"]})
        page.wait_for_selector("#run-head h1 .state-cancelled", timeout=60_000)  # morphed in
        assert page.locator("button:text('Stop')").count() == 0
        assert page.eval_on_selector("#run-head h1", "h => h.__kept === true")
        assert not seen["dialogs"] and not seen["page_errors"], seen


def test_a_follow_up_on_a_repeated_batch_run_streams_its_new_turn(web, daemon):
    batch = wait_batch(daemon, start_repeated(daemon, "answer: first turn")["id"])
    run = batch["runs"][0]
    with browser_page() as (page, seen):
        sign_in(page, web, f"/batches/{batch['id']}/runs/{run['id']}")
        page.wait_for_selector(".answer:has-text('first turn')")
        page.fill("#followup", "answer: the second turn")
        page.click("button:text('Follow up')")
        page.wait_for_selector("h3.turn:text('Turn 2')", timeout=60_000)
        page.evaluate("window.__notReloaded = true")
        page.wait_for_selector(
            ".answer:has-text('the second turn')", timeout=60_000
        )  # streamed in live
        assert page.evaluate("window.__notReloaded") is True
        assert page.locator("a.chip:text('2 · followup')").count() == 1
        # The run's task in its head; each turn opens with its prompt, the follow-up's text too.
        page.click("#run-head details.prompt summary")
        assert "first turn" in page.inner_text("#run-head details.prompt")
        page.click("details.turn-prompt[data-turn='1'] summary")
        assert "answer: first turn" in page.inner_text("details.turn-prompt[data-turn='1']")
        assert "the second turn" in page.inner_text("details.turn-prompt[data-turn='2']")
        assert not seen["dialogs"] and not seen["page_errors"], seen


def test_a_blocked_ranked_batch_says_why_and_unblocks_after_a_rerun(web, daemon):
    candidate = "require: UNBLOCK\nwrite: A.md = a\ncommit: Add A\nanswer: done"
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(make_repo()),
            "runs": 1,
            "reviewers": 1,
            "runtime": "demo",
            "prompt": candidate,
            "review_prompt": "score: auto",
        },
    )
    blocked = wait_batch(daemon, batch["id"])
    assert blocked["state"] == "blocked"
    run = blocked["runs"][0]
    with browser_page() as (page, seen):
        sign_in(page, web)
        assert "rerun or resume it" in page.inner_text(".needs-you")
        page.click(f".needs-you a:text('{batch['id']}')")
        assert "rerun or resume it to continue" in page.inner_text("p.reason")
        screenshot(page, "batch-blocked")
        (Path(run["worktree"]) / "UNBLOCK").write_text("go\n")
        page.click(f"a:text('{run['title']}')")
        page.click("button:text('Rerun')")
        page.click(f"a:text('batch {batch['id']}')")
        page.evaluate("window.__notReloaded = true")
        page.wait_for_selector("td.rank:text('#1')", timeout=90_000)
        assert page.evaluate("window.__notReloaded") is True
        assert page.locator("#batch h1 .state-completed").count() == 1
        assert not seen["dialogs"] and not seen["page_errors"], seen
