"""How the pages look in a real browser (Debian's chromium through Playwright): dark from
`prefers-color-scheme: dark`, light otherwise, and at a phone's width every page fits the screen
(no sideways scrolling) with its tables turned into cards. Saves the dark and phone screenshots."""

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, screenshot, sign_in

pytestmark = pytest.mark.browser

LONG = "a-rather-long-word-that-a-narrow-screen-must-wrap-" * 4
TASK = f"Write the notes.\nwrite: notes.md = {LONG}\nanswer: {LONG} done"


def finished_batch(daemon):
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(make_repo()),
            "runs": 1,
            "reviewers": 1,
            "prompt": f"{TASK}\ncommit: Add notes",
            "review_prompt": "score: 70\nscore_reason: clear enough",
        },
    )
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "completed", done["state_reason"]
    return done, next(r for r in done["runs"] if r["stage"] == "candidate")


def colors(page):
    return page.evaluate(
        "() => { const s = getComputedStyle(document.body); return [s.backgroundColor, s.color]; }"
    )


def test_dark_and_light_follow_prefers_color_scheme(web, daemon):
    batch, run = finished_batch(daemon)
    pages = ["/", f"/batches/{batch['id']}", f"/batches/{batch['id']}/runs/{run['id']}"]
    seen_colors = {}
    for scheme in ("light", "dark"):
        with browser_page(color_scheme=scheme) as (page, seen):
            sign_in(page, web)
            for path in pages:
                page.goto(f"{web.base}{path}")
                seen_colors.setdefault(scheme, set()).add(tuple(colors(page)))
            if scheme == "dark":
                screenshot(page, "run-session-dark")
                page.goto(f"{web.base}/batches/{batch['id']}")
                screenshot(page, "batch-ranked-dark")
            assert not seen["page_errors"] and not seen["console_errors"], seen
    assert seen_colors["light"] == {("rgb(255, 255, 255)", "rgb(27, 31, 36)")}
    assert seen_colors["dark"] == {("rgb(13, 17, 23)", "rgb(230, 237, 243)")}


def test_at_a_phones_width_every_page_fits_and_tables_become_cards(web, daemon):
    batch, run = finished_batch(daemon)
    run_url = f"/batches/{batch['id']}/runs/{run['id']}"
    pages = {
        "/": "table.batches td",
        f"/batches/{batch['id']}": "table.ranking td",
        run_url: None,
        f"{run_url}?tab=changes": None,
        f"{run_url}?tab=log": "table.events td",
        "/batches/new": None,
        "/agents/new": None,
        f"/agents/{run['agent_id']}": None,
    }
    with browser_page(width=390, height=844) as (page, seen):
        sign_in(page, web)
        for path, cell in pages.items():
            page.goto(f"{web.base}{path}")
            wide = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            assert wide[0] <= wide[1], (path, wide)  # nothing scrolls sideways
            if cell:
                shown = page.eval_on_selector(cell, "el => getComputedStyle(el).display")
                assert shown == "block", (path, shown)  # a row is a card, its cells stacked
            if path == run_url:
                screenshot(page, "run-phone")
        assert not seen["page_errors"] and not seen["console_errors"], seen
