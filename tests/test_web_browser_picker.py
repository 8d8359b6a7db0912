"""The New batch form's folder picker in a real browser (Debian's chromium through Playwright):
"Browse folders…" takes what was typed along, walking the folders keeps it, and "use" returns
to the form with everything as it was and the chosen folder in Project; then the batch starts."""

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, picker_home, screenshot, sign_in  # noqa: F401 (fixture)

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("javascript", [True, False], ids=["js", "no-js"])
def test_choosing_a_folder_in_the_picker_keeps_what_else_was_typed(web, daemon, javascript):
    repo = make_repo()
    with browser_page(javascript=javascript) as (page, seen):
        sign_in(page, web, "/batches/new")
        page.select_option("#f-workflow", "repeated")
        page.fill("#f-project", str(repo.parent.parent))  # a folder above it: browse from there
        page.fill("#f-prompt", "answer: picked <b>folder</b>\nsteps: 1")
        page.fill("#f-runs", "2")
        page.fill("#f-stall_seconds", "45")
        page.click("#browse")
        page.wait_for_selector(f"li button:text('{repo.parent.name}/')")
        assert "The rest of the New batch form is kept." in page.inner_text("main")
        page.click(f"li button:text('{repo.parent.name}/')")  # one folder down, still carried
        page.wait_for_selector("li button:text('proj/')")
        assert page.locator("li:has(button:text('proj/')) .badge:text('git')").count() == 1
        if javascript:
            screenshot(page, "folder-picker")
        page.click("li:has(button:text('proj/')) button.chip:text('use')")
        page.wait_for_selector("#f-project")
        assert page.input_value("#f-project") == str(repo)
        assert page.input_value("#f-prompt") == "answer: picked <b>folder</b>\nsteps: 1"
        assert page.input_value("#f-runs") == "2" and page.input_value("#f-stall_seconds") == "45"
        assert page.input_value("#f-workflow") == "repeated"
        assert "branch main" in page.inner_text("#inspect")  # inspected on the way back
        page.click("button.primary")
        page.wait_for_url("**/batches/bt_*")
        batch = wait_batch(daemon, page.url.rsplit("/", 1)[1])
        assert batch["project_root"] == str(repo) and len(batch["runs"]) == 2
        assert batch["config"]["prompt"] == "answer: picked <b>folder</b>\nsteps: 1"
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen
