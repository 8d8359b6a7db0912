"""The web UI without a mouse and without JavaScript, in a real browser (Debian's chromium through
Playwright): an agent started from the Start agent form with Tab, typing, arrow keys and Enter,
each focused control showing a focus ring; and with JS off, home, a batch, a run's Session and
Changes tabs are readable and the New batch form posts and redirects (or comes back with the
refused field's message next to it)."""

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, picker_home, sign_in  # noqa: F401 (fixture)

pytestmark = pytest.mark.browser

EDITS = (
    "write: README.md = # project, edited\nwrite: GREETING.md = Welcome!\n"
    "answer: Edited README.md and added GREETING.md."
)

FOCUSED = """() => {
  const e = document.activeElement, s = getComputedStyle(e);
  return {id: e.id, tag: e.tagName.toLowerCase(), text: (e.innerText || '').trim(),
          ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0};
}"""


def tab_to(page, wanted, most: int = 40) -> list[dict]:
    """Press Tab until `wanted(focused)`; every control passed on the way must show its focus."""
    passed = []
    for _ in range(most):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        passed.append(focused)
        assert focused["ring"], f"no visible focus on {focused}"
        if wanted(focused):
            return passed
    raise AssertionError(f"not reached with {most} Tabs: {passed}")


def by_id(name):
    return lambda f: f["id"] == name


def test_start_an_agent_with_the_keyboard_only(web, daemon, workdir):
    with browser_page() as (page, seen):
        sign_in(page, web, "/agents/new")
        tab_to(page, by_id("f-task"))
        page.keyboard.type("answer: typed, never clicked")
        tab_to(page, by_id("f-workdir"))
        page.keyboard.type(str(workdir))
        tab_to(page, by_id("f-profile"))
        page.keyboard.press("ArrowDown")  # write -> read_only, on a closed select
        tab_to(page, lambda f: f["tag"] == "button" and f["text"] == "Start")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert "/agents/ag_" in page.url
        agent = daemon.call("agent", {"agent_id": page.url.rsplit("/", 1)[1]})
        assert agent["workdir"] == str(workdir) and agent["profile"] == "read_only"
        assert agent["task"] == "answer: typed, never clicked"
        page.wait_for_selector(".answer:has-text('typed, never clicked')", timeout=60_000)
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen


def test_with_javascript_off_every_page_reads_and_the_new_batch_form_posts(web, daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {"workflow": "repeated", "project": str(repo), "runs": 1, "prompt": EDITS},
    )
    run = wait_batch(daemon, batch["id"])["runs"][0]
    with browser_page(javascript=False) as (page, seen):
        sign_in(page, web)
        assert page.inner_text("#live-status") == "static"  # no script runs
        page.click(f"table a:text('{batch['id']}')")
        assert page.url == f"{web.base}/batches/{batch['id']}"
        assert "repeated" in page.inner_text("main") and "completed" in page.inner_text("h1")
        with page.expect_navigation():  # loaded, not just committed: count() does not wait
            page.click(f"a[href='/batches/{batch['id']}/runs/{run['id']}']")
        assert page.locator("h3.turn").count() >= 1  # Session: the transcript, server-rendered
        assert page.locator(".answer .badge.ok:text('verified')").count() == 1
        assert "added GREETING.md" in page.inner_text(".answer")
        page.click("nav.tabs a:text('Changes')")
        assert "+# project, edited" in page.inner_text("pre.diff")  # uncommitted, tracked
        assert page.inner_text(".file-diff summary .path") == "README.md"  # a section per file
        assert page.inner_text("details.untracked summary .path") == "GREETING.md"  # untracked
        assert "Welcome!" in page.inner_text("details.untracked pre.preview")  # previewed
        page.click("header nav a:text('New batch')")
        page.select_option("#f-workflow", "repeated")
        page.fill("#f-project", str(repo.parent))  # refused: not a git repository
        page.fill("#f-prompt", "answer: from a page without JS")
        page.fill("#f-runs", "1")
        with page.expect_navigation() as refused:
            page.click("button.primary")
        assert refused.value.status == 422  # the form again, the tool's message by the field
        assert page.locator("#e-project").count() == 1, page.inner_text("main")
        assert page.input_value("#f-prompt") == "answer: from a page without JS"  # kept
        page.fill("#f-project", str(repo))
        with page.expect_navigation():
            page.click("button.primary")
        assert "/batches/bt_" in page.url  # posted, then redirected to the new batch
        new_id = page.url.rsplit("/", 1)[1]
        assert wait_batch(daemon, new_id)["state"] == "completed"
        assert str(repo) in page.inner_text("main")
        assert not seen["dialogs"] and not seen["page_errors"], seen
