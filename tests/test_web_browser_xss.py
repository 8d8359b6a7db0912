"""XSS probes in every agent-made field a page shows, in a real browser (Debian's chromium through
Playwright): the task and each turn's prompt, transcript messages and tool calls, the answers, a
commit message, a diff, an untracked file's name and preview, a reviewer's reason, a generated
task's title and prompt (also the run's title, in its <h1>, <title> and Home's chips), a
validator's reason for a worker, and the task lines on Home. On every page: no dialog, no
element made from a probe, and each probe shown as text."""

import json

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, sign_in
from tests.harness import wait_for

pytestmark = pytest.mark.browser

UNTRACKED = "u<script>alert('untracked')<.txt"  # no "/" or "=": the demo's write takes it literally
TASK = "<script>alert('task')</script>"
FIRST_ANSWER = "<img src=x onerror=alert('answer')> <script>alert('answer')</script>"
FIRST = (
    f"# {TASK}\nwrite: probe.md = <img src=x onerror=alert('diff')>\n"
    "commit: <img src=x onerror=alert('commit')>\n"
    f"answer: {FIRST_ANSWER}"
)
SECOND_ANSWER = "again <script>alert('turn')</script>"
SECOND = f"write: {UNTRACKED} = <img src=x onerror=alert('preview')>\nanswer: {SECOND_ANSWER}"
REVIEW_REASON = "<img src=x onerror=alert('review')>"
HOME_TASK = "<img src=x onerror=alert('home')> a standalone probe"
BLOCKED_TASK = "<script>alert('blocked')</script> a blocked probe"


def assert_inert(page, seen, where):
    assert page.locator("main img, main svg, main iframe, main object").count() == 0, where
    assert page.locator("main script, head script:not([src])").count() == 0, where
    assert page.locator("[onerror], [onload], [onclick]").count() == 0, where
    assert seen["dialogs"] == [] and seen["page_errors"] == [], (where, seen)


def run_of(daemon, batch_id, run_id):
    return next(
        r for r in daemon.call("batch", {"batch_id": batch_id})["runs"] if r["id"] == run_id
    )


def open_details(page, selector):
    for summary in page.locator(f"{selector} > summary").all():
        summary.click()


def test_xss_probes_in_a_ranked_run_its_review_and_home_stay_text(web, daemon, workdir):
    # A ranked candidate: the one stage that commits (create_commit); its reviewer's reason.
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(make_repo()),
            "runs": 1,
            "reviewers": 1,
            "review_prompt": f"score: auto\nscore_reason: {REVIEW_REASON}",
            "runtime": "demo",
            "prompt": FIRST,
        },
    )
    done = wait_batch(daemon, batch["id"])
    run = next(r for r in done["runs"] if r["stage"] == "candidate")
    assert run["state"] == "succeeded", (run, done["state_reason"])
    daemon.call("run_followup", {"run_id": run["id"], "text": SECOND, "reopen": True})
    alone = daemon.call("start", {"task": HOME_TASK, "workdir": str(workdir)})
    blocked = daemon.call(
        "start",
        {"task": f"{BLOCKED_TASK}\nfinish: x\nfinish_status: blocked", "workdir": str(workdir)},
    )
    for agent in (alone, blocked):
        daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    wait_for(
        lambda: (lambda r: r["attempt"] == 2 and r["state"] == "succeeded")(
            run_of(daemon, batch["id"], run["id"])
        ),
        timeout=90,
        what="the follow-up settled",
    )
    run_url = f"/batches/{batch['id']}/runs/{run['id']}"
    with browser_page() as (page, seen):
        sign_in(page, web, "/")
        assert HOME_TASK in page.inner_text("table.agents")  # the standalone agent's task line
        assert BLOCKED_TASK in page.inner_text(".needs-you")  # the blocked agent's, under Needs you
        assert_inert(page, seen, "home")
        page.goto(f"{web.base}/batches/{batch['id']}")
        assert REVIEW_REASON in page.inner_text("td .review")
        assert_inert(page, seen, "batch")
        page.goto(f"{web.base}{run_url}")
        page.wait_for_selector(".answer:has-text('again')")
        open_details(page, "#run-head details.prompt")
        assert TASK in page.inner_text("#run-head details.prompt")  # the run's task
        open_details(page, "details.turn-prompt[data-turn='1']")
        assert TASK in page.inner_text("details.turn-prompt[data-turn='1']")
        assert f"answer: {SECOND_ANSWER}" in page.inner_text("details.turn-prompt[data-turn='2']")
        session = page.inner_text("#session")
        assert FIRST_ANSWER in session  # turn 1's answer, in the transcript
        assert SECOND_ANSWER in page.inner_text(".answer")  # the verified answer
        open_details(page, "details.tools")
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
        open_details(page, "#agent-head details.prompt")
        assert TASK in page.inner_text("#agent-head details.prompt")
        assert_inert(page, seen, "agent")


TITLE = "<img src=x onerror=alert('title')>"
GENERATED_PROMPT = "require: NOPE\n<script>alert('gprompt')</script>"
VALIDATOR_REASON = "<img src=x onerror=alert('vreason')>"


def test_xss_probes_in_generated_tasks_and_a_validators_reasons_stay_text(web, daemon):
    tasks = json.dumps([{"title": TITLE, "prompt": GENERATED_PROMPT}])
    generated = daemon.call(  # its one task fails (require), so Home's Needs you lists the run
        "batch_start",
        {
            "workflow": "generated",
            "project": str(make_repo()),
            "runs": 1,
            "runtime": "demo",
            "prompt": f"answer: {tasks}",
        },
    )
    verdict = {"workers": [{"worker": 1, "pass": True, "reason": VALIDATOR_REASON}], "winner": 1}
    validated = daemon.call(
        "batch_start",
        {
            "workflow": "validated",
            "project": str(make_repo()),
            "runs": 1,
            "runtime": "demo",
            "prompt": "write: a.txt = 1\nresult: auto",
            "validator_prompt": f"finish: {json.dumps(verdict)}",
        },
    )
    gen = wait_batch(daemon, generated["id"])
    worker = next(r for r in gen["runs"] if r["stage"] == "worker")
    assert worker["title"] == TITLE and worker["state"] == "failed", gen
    val = wait_batch(daemon, validated["id"])
    assert val["state"] == "completed", val["state_reason"]
    with browser_page() as (page, seen):
        sign_in(page, web, "/")
        assert TITLE in page.inner_text(".needs-you")  # the failed run's chip
        assert_inert(page, seen, "home")
        page.goto(f"{web.base}/batches/{gen['id']}")
        assert TITLE in page.inner_text("li.task strong")
        open_details(page, "li.task details")
        assert "<script>alert('gprompt')</script>" in page.inner_text("li.task details")
        assert_inert(page, seen, "generated batch")
        page.goto(f"{web.base}/batches/{gen['id']}/runs/{worker['id']}")
        assert TITLE in page.inner_text("#run-head h1") and TITLE in page.title()
        open_details(page, "#run-head details.prompt")
        assert "<script>alert('gprompt')</script>" in page.inner_text("#run-head details.prompt")
        assert_inert(page, seen, "generated run")
        page.goto(f"{web.base}/batches/{val['id']}")
        assert VALIDATOR_REASON in page.inner_text("td.reason")
        assert_inert(page, seen, "validated batch")
