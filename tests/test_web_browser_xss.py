"""XSS probes in every agent-made field a page shows, in a real browser (Debian's chromium through
Playwright): the task, transcript messages and tool calls, the answer, a commit message, a diff,
an untracked file's name and an untracked file's preview. Nothing runs, no element is
made, and each probe is shown as text."""

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, sign_in
from tests.harness import wait_for

pytestmark = pytest.mark.browser

UNTRACKED = "u<script>alert('untracked')<.txt"  # no "/" or "=": the demo's write takes it literally
FIRST = (
    "# <script>alert('task')</script>\nwrite: probe.md = <img src=x onerror=alert('diff')>\n"
    "commit: <img src=x onerror=alert('commit')>\n"
    "answer: <img src=x onerror=alert('answer')> <script>alert('answer')</script>"
)
SECOND = (
    f"write: {UNTRACKED} = <img src=x onerror=alert('preview')>\n"
    "answer: again <script>alert('turn')</script>"
)


def assert_inert(page, seen, where):
    assert page.locator("main img, main svg, main iframe, main object").count() == 0, where
    assert page.locator("main script").count() == 0, where
    assert seen["dialogs"] == [] and seen["page_errors"] == [], (where, seen)


def test_xss_probes_in_every_agent_made_field_stay_text(web, daemon):
    # A ranked candidate: the one stage that commits (create_commit).
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(make_repo()),
            "runs": 1,
            "reviewers": 1,
            "review_prompt": "score: auto",
            "runtime": "demo",
            "prompt": FIRST,
        },
    )
    done = wait_batch(daemon, batch["id"])
    run = next(r for r in done["runs"] if r["stage"] == "candidate")
    assert run["state"] == "succeeded", (run, done["state_reason"])
    daemon.call("run_followup", {"run_id": run["id"], "text": SECOND, "reopen": True})

    def settled():
        now = next(
            r
            for r in daemon.call("batch", {"batch_id": batch["id"]})["runs"]
            if r["id"] == run["id"]
        )
        return now["attempt"] == 2 and now["state"] == "succeeded"

    wait_for(settled, timeout=90, what="the follow-up settled")
    run_url = f"/batches/{batch['id']}/runs/{run['id']}"
    with browser_page() as (page, seen):
        sign_in(page, web, "/")
        assert_inert(page, seen, "home")
        page.goto(f"{web.base}/batches/{batch['id']}")
        assert_inert(page, seen, "batch")
        page.goto(f"{web.base}{run_url}")
        page.wait_for_selector(".answer:has-text('again')")
        page.click("details.prompt summary") if page.locator("details.prompt").count() else None
        session = page.inner_text("#session")
        assert "<img src=x onerror=alert('answer')>" in session or "alert('turn')" in session
        assert "alert('turn')</script>" in session
        for details in page.locator("details.tools summary").all():
            details.click()
        assert UNTRACKED in page.inner_text("#session")  # the tool call names the file
        assert_inert(page, seen, "session")
        page.goto(f"{web.base}{run_url}?tab=changes")
        changes = page.inner_text(".changes")
        for probe in (
            "<img src=x onerror=alert('diff')>",
            "<img src=x onerror=alert('commit')>",
            UNTRACKED,
            "<img src=x onerror=alert('preview')>",
        ):
            assert probe in changes, probe
        assert_inert(page, seen, "changes")
        page.goto(f"{web.base}{run_url}?tab=log")
        assert_inert(page, seen, "log")
        page.goto(f"{web.base}/agents/{run['agent_id']}")
        page.click("details.prompt summary")
        assert "<script>alert('task')</script>" in page.inner_text(
            "details.prompt"
        ) or "alert('task')" in page.inner_text("details.prompt")
        assert_inert(page, seen, "agent")
