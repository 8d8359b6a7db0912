"""The Start agent form in a real browser (Debian's chromium through Playwright): the Model
select offers only the chosen runtime's models, and the agent starts on what was picked."""

from collections.abc import Iterator

import pytest

from agent_run.system.home import Home
from tests.browser_harness import browser_page, screenshot, sign_in
from tests.harness import make_home, remove_home
from tests.test_web_runtimes import RUNTIMES

pytestmark = pytest.mark.browser


@pytest.fixture(name="home")
def runtimes_home() -> Iterator[Home]:
    h = make_home(RUNTIMES)
    yield h
    remove_home(h)


def test_the_model_select_follows_the_chosen_runtime(web, daemon, workdir):
    with browser_page() as (page, seen):
        sign_in(page, web, "/agents/new")

        def offered():
            return page.eval_on_selector_all(
                "#f-model optgroup:not([disabled]) option", "els => els.map(e => e.value)"
            )

        assert offered() == ["demo-1", "demo-2"]  # the default runtime's (demo)
        page.select_option("#f-runtime", "quick")
        assert offered() == ["quick-1"]
        page.select_option("#f-model", "quick-1")
        page.select_option("#f-runtime", "demo")
        assert page.input_value("#f-model") == ""  # another runtime's model is not kept
        page.select_option("#f-runtime", "quick")
        page.select_option("#f-model", "quick-1")
        page.fill("#f-task", "answer: from the form")
        page.fill("#f-workdir", str(workdir))
        screenshot(page, "start-agent")
        page.click("button.primary")
        page.wait_for_url("**/agents/ag_*")
        agent = daemon.call("agent", {"agent_id": page.url.rsplit("/", 1)[1]})
        assert (agent["runtime"], agent["model"]) == ("quick", "quick-1")
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen
