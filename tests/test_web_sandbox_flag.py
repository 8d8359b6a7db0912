"""An agent whose runtime has `sandbox = "none"` is flagged "no sandbox" on Home, on its Agent
page and on its run's page; a sandboxed one is not (a real daemon with two demo runtimes)."""

import re
from collections.abc import Iterator

import pytest

from agent_run.system.home import Home
from tests.batch_harness import make_repo, wait_batch
from tests.harness import TEST_CONFIG, make_home, remove_home

OPEN_RUNTIME = '[runtimes.demo_open]\nengine = "demo"\nmodels = ["demo-1"]\nsandbox = "none"\n'
FLAG = '<span class="badge warn sandbox-none"'


@pytest.fixture(name="home")
def home_with_an_unsandboxed_runtime() -> Iterator[Home]:
    h = make_home(TEST_CONFIG + OPEN_RUNTIME)
    yield h
    remove_home(h)


def test_an_unsandboxed_agent_is_flagged_on_home_its_page_and_its_run(web, daemon, workdir):
    start = {"task": "answer: hi", "workdir": str(workdir)}
    boxed = daemon.call("start", {**start, "runtime": "demo"})
    open_ = daemon.call("start", {**start, "runtime": "demo_open"})
    for agent in (boxed, open_):
        daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    assert (boxed["sandbox"], open_["sandbox"]) == ("bubblewrap", "none")
    client = web.client()
    home = client.get("/").text
    rows = dict(re.findall(r'<tr><td><a href="/agents/(ag_\w+)">.*?</td><td>(.*?)</td>', home))
    assert FLAG in rows[open_["id"]] and FLAG not in rows[boxed["id"]]
    assert FLAG in client.get(f"/agents/{open_['id']}").text
    assert "none: the engine runs unsandboxed" in client.get(f"/agents/{open_['id']}").text
    assert FLAG not in client.get(f"/agents/{boxed['id']}").text
    batch = wait_batch(
        daemon,
        daemon.call(
            "batch_start",
            {
                "workflow": "repeated",
                "project": str(make_repo()),
                "runs": 1,
                "runtime": "demo_open",
                "prompt": "answer: hi",
            },
        )["id"],
    )
    run = batch["runs"][0]
    for tab in ("session", "changes", "log"):
        page = client.get(f"/batches/{batch['id']}/runs/{run['id']}", params={"tab": tab}).text
        head = page[page.index('<section id="run-head"') : page.index("</section>")]
        assert FLAG in head, tab
