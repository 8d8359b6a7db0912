"""The web UI in a real browser: a run's Log tab filtered by kind, a validated batch whose verdict
appears live, and a failed tool call marked in a session. Saves docs/web/*.png."""

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, picker_home, screenshot, sign_in  # noqa: F401 (fixture)

pytestmark = pytest.mark.browser


def test_a_runs_log_tab_filters_events_by_kind(web, daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": 1,
            "runtime": "demo",
            "prompt": "steps: 2\nstep_seconds: 0.1\nanswer: logged",
        },
    )
    batch = wait_batch(daemon, batch["id"])
    run = batch["runs"][0]
    events = daemon.call("events", {"agent_id": run["agent_id"]})["items"]
    with browser_page() as (page, seen):
        sign_in(page, web, f"/batches/{batch['id']}/runs/{run['id']}")
        page.click("nav.tabs a:text('Log')")
        page.wait_for_selector("table.events")
        assert page.locator("tr.event").count() == len(events)
        page.click("p.filters a.chip:text('state')")
        page.wait_for_selector("p.filters a.chip.current:text('state')")
        assert (
            page.locator("tr.event").count() == len([e for e in events if e["kind"] == "state"]) > 0
        )
        assert page.locator("tr.event:not(.event-state)").count() == 0
        screenshot(page, "run-log")
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen


def test_a_validated_batch_shows_the_verdict_live(web, daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "validated",
            "project": str(repo),
            "runs": 2,
            "runtime": "demo",
            "prompt": "steps: 3\nstep_seconds: 0.3\nwrite: answer.txt = 42\nresult: auto",
            "validator_prompt": "steps: 2\nstep_seconds: 0.3\nverdict: auto",
        },
    )
    with browser_page() as (page, seen):
        sign_in(page, web, f"/batches/{batch['id']}")
        page.wait_for_selector("#live-status[data-state=live]")
        done = wait_batch(daemon, batch["id"])
        assert done["state"] == "completed", done["state_reason"]
        winner = next(r for r in done["runs"] if r["stage"] == "validator")["result"]["winner"]
        page.wait_for_selector(
            f"#winner:text('worker {winner}')", timeout=30_000
        )  # without a reload
        assert page.evaluate("window.__notReloaded") is True
        assert page.locator("table.verdicts tr.winner").count() == 1
        assert page.locator("table.verdicts td.verdict .badge").count() == 2
        screenshot(page, "batch-validated")
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen


def test_a_failed_tool_call_is_marked_in_the_session(web, daemon, workdir):
    agent = daemon.call(
        "start",
        {
            "task": "write: out.txt = no\nanswer: could not write",
            "workdir": str(workdir),
            "profile": "read_only",
        },
    )
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    with browser_page() as (page, seen):
        sign_in(page, web, f"/agents/{agent['id']}")
        page.wait_for_selector("details.tools.has-failed summary .badge.bad:text('1 failed')")
        page.click("details.tools summary")
        assert page.locator("pre.tool-failed").is_visible()
        assert "read_only profile does not allow" in page.inner_text("pre.tool-failed")
        screenshot(page, "agent-failed-tool")
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen
