"""The web UI in a real browser (Debian's chromium through Playwright) on a real daemon and
`agent-run web` process: live updates, tabs, XSS probes, reconnection. Saves docs/web/*.png."""

import os
import signal
import socket

import pytest

from tests.batch_harness import make_repo, wait_batch
from tests.browser_harness import browser_page, picker_home, screenshot, sign_in  # noqa: F401 (fixture)
from tests.harness import wait_for
from tests.web_harness import WebProcess

pytestmark = pytest.mark.browser

CANDIDATE = (
    "Add GREETING.md for new contributors.\nsteps: 15\nstep_seconds: 0.3\n"
    "write: GREETING.md = Welcome! Read README.md first.\ncommit: Add a greeting\n"
    "answer: Added GREETING.md and committed it."
)
REVIEW = "Is the greeting friendly?\nsteps: 2\nstep_seconds: 0.3\nscore: auto"


def test_a_ranked_batch_from_the_form_updates_live_until_the_ranking_appears(web, daemon):
    repo = make_repo()
    with browser_page() as (page, seen):
        sign_in(page, web, "/batches/new")
        page.select_option("#f-workflow", "ranked")
        page.fill("#f-project", str(repo))
        page.press("#f-project", "Tab")  # a change: the page asks project_inspect, live
        page.wait_for_selector("#inspect code:text('main')")
        assert repo.name in page.inner_text("#inspect")
        page.fill("#f-prompt", CANDIDATE)
        page.fill("#f-runs", "2")
        page.fill("#f-reviewers", "2")
        page.fill("#f-review_prompt", REVIEW)
        page.fill("#f-verify_command", "test -s GREETING.md")
        page.select_option("#f-runtime", "demo")  # the configured runtimes, and their models
        page.select_option("#f-model", "demo-1")
        screenshot(page, "new-batch")
        page.click("button.primary")
        page.wait_for_url("**/batches/bt_*")
        page.evaluate("window.__notReloaded = true")
        page.wait_for_selector("#live-status[data-state=live]")
        batch_id = page.url.rsplit("/", 1)[1]
        # Rows change state live: the first render shows the candidates not yet done (4.5 s
        # each), and the page then shows them succeeded without a reload.
        first = page.eval_on_selector_all(
            "table.ranking tr[data-run]", "els => els.map(e => e.dataset.state)"
        )
        assert len(first) == 2 and not {"succeeded", "failed"} & set(first), first
        page.wait_for_selector("table.ranking tr[data-state=running]", timeout=60_000)
        screenshot(page, "batch-running")
        page.wait_for_selector("table.ranking tr[data-state=succeeded]", timeout=60_000)
        assert page.evaluate("window.__notReloaded") is True
        batch = wait_batch(daemon, batch_id)
        assert batch["state"] == "completed", batch["state_reason"]
        page.wait_for_selector(
            "td.rank:text('#1')", timeout=30_000
        )  # the ranking, without a reload
        assert page.evaluate("window.__notReloaded") is True
        assert page.locator("td.rank:text('#2')").count() == 1
        screenshot(page, "batch-ranked")
        page.goto(f"{web.base}/")
        page.wait_for_selector(f"a:text('{batch_id}')")
        screenshot(page, "home")
        assert not seen["dialogs"] and not seen["page_errors"], seen
        assert not seen["console_errors"], seen  # a CSP violation would be reported here


def test_a_runs_session_and_changes_tabs(web, daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(repo),
            "runs": 1,
            "reviewers": 1,
            "runtime": "demo",
            "prompt": CANDIDATE,
            "review_prompt": REVIEW,
        },
    )
    batch = wait_batch(daemon, batch["id"])
    run = next(r for r in batch["runs"] if r["stage"] == "candidate")
    answer = daemon.call("answer", {"agent_id": run["agent_id"]})
    with browser_page() as (page, seen):
        sign_in(page, web, f"/batches/{batch['id']}/runs/{run['id']}")
        page.wait_for_selector(".answer .badge.ok:text('verified')")
        assert answer["sha256"] in page.inner_text(".answer")
        assert page.locator("h3.turn").count() >= 1
        screenshot(page, "run-session")
        page.click("nav.tabs a:text('Changes')")
        page.wait_for_selector("details.file-diff pre.diff")
        assert page.inner_text(".file-diff summary .path") == "GREETING.md"  # one file, one section
        assert "+Welcome! Read README.md first." in page.inner_text(".file-diff pre.diff")
        assert "Add a greeting" in page.inner_text("ul.commits")
        screenshot(page, "run-changes")
        page.click("nav.tabs a:text('Session')")
        page.wait_for_selector(".answer")
        assert not seen["dialogs"] and not seen["page_errors"] and not seen["console_errors"], seen


XSS = "<script>alert('xss-script')</script> <img src=x onerror=\"alert('xss-img')\">"


def test_xss_probes_in_a_task_and_an_answer_never_run(web, daemon, workdir):
    agent = daemon.call(
        "start",
        {
            "task": f"# {XSS}\n[link](javascript:alert('xss-link'))\nanswer: {XSS}",
            "workdir": str(workdir),
        },
    )
    wait_for(
        lambda: daemon.call("agent", {"agent_id": agent["id"]})["state"] == "succeeded",
        what="agent done",
    )
    with browser_page() as (page, seen):
        sign_in(page, web, f"/agents/{agent['id']}")
        page.wait_for_selector(".answer")
        page.click("details.prompt summary")
        for link in page.locator(".md a").all():
            link.click(no_wait_after=True)
        assert page.locator("img").count() == 0
        assert page.locator("main script").count() == 0
        assert "<script>alert('xss-script')</script>" in page.inner_text(".answer")
        screenshot(page, "agent")
        page.goto(f"{web.base}/")
        assert page.locator("img").count() == 0
        assert seen["dialogs"] == [], seen


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Every `change` event the page's live.js gets, recorded by a listener on the document.
RECORD_CHANGES = """
window.__changes = [];
document.addEventListener("agentrun:change", (e) => window.__changes.push(e.detail));
"""


def test_the_page_reconnects_after_the_web_process_and_the_daemon_are_killed_and_restarted(
    daemon, workdir
):
    web = WebProcess(daemon.home, port=free_port()).start()
    try:
        with browser_page(width=390, height=800) as (page, seen):  # a phone's width
            page.add_init_script(RECORD_CHANGES)
            sign_in(page, web)
            page.wait_for_selector("#live-status[data-state=live]")
            start = int(page.evaluate("document.body.dataset.revision"))
            web.kill9()
            page.wait_for_selector("#live-status[data-state=reconnecting]")
            # Changes while nobody serves the page: replayed after the restart, by Last-Event-ID.
            agent = daemon.call(
                "start", {"task": "answer: made while the web was down", "workdir": str(workdir)}
            )
            daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
            web = WebProcess(daemon.home, port=web.port).start()
            page.wait_for_selector(f"a:text('{agent['id']}')", timeout=60_000)
            assert page.evaluate("window.__notReloaded") is True
            page.wait_for_selector("#live-status[data-state=live]")
            screenshot(page, "home-phone")
            # The daemon too, under the running web process: killed and restarted, and an agent
            # run start to end before the web's change hub is back. The web process is frozen
            # (SIGSTOP) meanwhile, so its hub cannot reconnect early: every event of that agent
            # comes from the daemon that the hub must catch up with, after its last revision.
            between = daemon.call("start", {"task": "answer: between", "workdir": str(workdir)})
            daemon.call("wait", {"agent_id": between["id"], "timeout_seconds": 60})
            page.wait_for_selector(
                f"a:text('{between['id']}')", timeout=60_000
            )  # the hub has history
            before_kill = max(c["revision"] for c in page.evaluate("window.__changes"))
            os.kill(web.proc.pid, signal.SIGSTOP)
            try:
                daemon.kill9()
                daemon.start()
                later = daemon.call(
                    "start", {"task": "answer: after the daemon restart", "workdir": str(workdir)}
                )
                daemon.call("wait", {"agent_id": later["id"], "timeout_seconds": 60})
            finally:
                os.kill(web.proc.pid, signal.SIGCONT)
            page.wait_for_selector(f"a:text('{later['id']}')", timeout=60_000)
            assert page.evaluate("window.__notReloaded") is True
            # Compared with the store: the events the page got, one after another, name every
            # agent and batch that changed since the page was rendered, up to the store's newest
            # revision; and the page lists every agent, none twice.
            store = daemon.call("changes", {"after_revision": start})
            assert not store["truncated"]
            wait_for(
                lambda: (
                    max(c["revision"] for c in page.evaluate("window.__changes"))
                    == store["revision"]
                ),
                timeout=30,
                what="the page to get the store's newest revision",
            )
            got = page.evaluate("window.__changes")
            revisions = [c["revision"] for c in got]
            assert revisions == sorted(set(revisions)) and revisions[0] > start, revisions
            assert {a for c in got for a in c["agents"]} == set(store["agents"]), (got, store)
            assert {b for c in got for b in c["batches"]} == set(store["batches"]), (got, store)
            assert {agent["id"], between["id"], later["id"]} <= set(store["agents"])
            after_restart = [c for c in got if c["revision"] > before_kill]
            assert any(later["id"] in c["agents"] for c in after_restart), got
            stored = sorted(a["id"] for a in daemon.call("list_agents", {"limit": 100})["items"])
            shown = page.eval_on_selector_all(
                "table.agents a[href^='/agents/']", "els => els.map(e => e.textContent)"
            )
            assert sorted(shown) == stored, (shown, stored)
            assert not seen["dialogs"] and not seen["page_errors"], seen
    finally:
        web.stop()
