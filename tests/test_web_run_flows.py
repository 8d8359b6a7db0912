"""Run, batch and agent actions posted through `agent-run web` against a real daemon (demo
engine): Stop on a queued run, Resume and an earlier attempt on the Run page, a follow-up on a
locked run with and without "reopen", batch cancel, clean-up confirm and force, and the
integrity-failure badge of a tampered answer."""

import re
from pathlib import Path

from tests.batch_harness import make_repo, wait_batch
from tests.harness import wait_for

SLOW = "steps: 300\nstep_seconds: 0.2\nanswer: slow"


def post(web, client, path, form=None):
    return client.post(
        path, data={**(form or {}), "csrf": web.csrf(client)}, headers={"origin": web.origin}
    )


def run_of(daemon, batch_id, run_id):
    return next(
        r for r in daemon.call("batch", {"batch_id": batch_id})["runs"] if r["id"] == run_id
    )


def buttons(html):
    """The run page's action buttons (their form actions' last part)."""
    return set(re.findall(r'action="/batches/[^/]+/runs/[^/]+/(\w+)"', html))


def repeated(daemon, prompt, **extra):
    return daemon.call(
        "batch_start",
        {"workflow": "repeated", "project": str(make_repo()), "prompt": prompt, **extra},
    )


def test_a_queued_run_offers_stop_and_stopping_it_cancels_it_before_it_starts(web, daemon):
    batch = repeated(daemon, SLOW, runs=2, concurrency=1)
    runs = daemon.call("batch", {"batch_id": batch["id"]})["runs"]
    wait_for(
        lambda: (
            {r["state"] for r in daemon.call("batch", {"batch_id": batch["id"]})["runs"]}
            == {"running", "queued"}
        ),
        what="one run running, one queued",
    )
    queued = next(
        r for r in daemon.call("batch", {"batch_id": batch["id"]})["runs"] if r["state"] == "queued"
    )
    client = web.client()
    url = f"/batches/{batch['id']}/runs/{queued['id']}"
    assert buttons(client.get(url).text) == {"stop"}  # queued: only Stop (no rerun, no follow-up)
    stopped = post(web, client, f"{url}/stop")
    assert stopped.status_code == 303 and stopped.headers["location"] == url
    after = run_of(daemon, batch["id"], queued["id"])
    assert after["state"] == "cancelled" and after["attempts"] == [] and after["agent_id"] is None
    assert "stop" not in buttons(client.get(url).text)
    daemon.call("batch_cancel", {"batch_id": batch["id"]})
    assert wait_batch(daemon, batch["id"])["state"] == "cancelled"
    assert len(runs) == 2


def test_resume_from_the_run_page_then_a_rerun_and_each_attempt_readable(web, daemon):
    batch = wait_batch(daemon, repeated(daemon, "require: GO\nanswer: first try", runs=1)["id"])
    run = batch["runs"][0]
    assert run["state"] == "failed", run
    client = web.client()
    url = f"/batches/{batch['id']}/runs/{run['id']}"
    assert buttons(client.get(url).text) == {"rerun", "resume", "followup"}  # failed: no Stop
    resumed = post(web, client, f"{url}/resume", {"prompt": "answer: resumed from the page"})
    assert resumed.status_code == 303, resumed.text
    wait_for(
        lambda: (lambda r: r["attempt"] == 2 and r["state"] == "succeeded")(
            run_of(daemon, batch["id"], run["id"])
        ),
        timeout=90,
        what="the resumed attempt to succeed",
    )
    now = run_of(daemon, batch["id"], run["id"])
    assert [(a["attempt"], a["kind"]) for a in now["attempts"]] == [(1, "start"), (2, "resume")]
    assert daemon.call("answer", {"agent_id": now["agent_id"]})["text"] == "resumed from the page"
    page = client.get(url).text
    assert "resumed from the page" in page and "2 · resume" in page
    # A rerun is a new agent: attempt 3; `?attempt=1` still reads the first agent's session.
    assert post(web, client, f"{url}/rerun").status_code == 303
    wait_for(
        lambda: (lambda r: r["attempt"] == 3 and r["state"] in ("succeeded", "failed"))(
            run_of(daemon, batch["id"], run["id"])
        ),
        timeout=90,
        what="the rerun to settle",
    )
    final = run_of(daemon, batch["id"], run["id"])
    first_agent, rerun_agent = final["attempts"][0]["agent_id"], final["attempts"][2]["agent_id"]
    assert first_agent != rerun_agent
    latest = client.get(url).text
    assert (
        f'data-agent="{rerun_agent}"' in latest
        and 'current" href="?tab=session&amp;attempt=3"' in latest
    )
    earlier = client.get(url, params={"attempt": "1"}).text
    assert f'data-agent="{first_agent}"' in earlier and f'data-agent="{rerun_agent}"' not in earlier
    assert 'current" href="?tab=session&amp;attempt=1"' in earlier
    assert "resumed from the page" in earlier  # the first agent's session: both its turns


def test_a_follow_up_on_a_locked_ranked_run_is_refused_until_reopen(web, daemon):
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(make_repo()),
            "runs": 1,
            "reviewers": 1,
            "prompt": "write: A.md = a\ncommit: Add A\nanswer: done",
            "review_prompt": "score: 5",
        },
    )
    batch = wait_batch(daemon, batch["id"])
    assert batch["state"] == "completed", batch["state_reason"]
    run = next(r for r in batch["runs"] if r["stage"] == "candidate")
    assert run["locked"] is True
    client = web.client()
    url = f"/batches/{batch['id']}/runs/{run['id']}"
    page = client.get(url).text
    assert (
        'name="reopen"' in page
        and "Locked: this run&#39;s result feeds the batch&#39;s ranking" in page
    )
    refused = post(web, client, f"{url}/followup", {"text": "answer: more, please"})
    assert refused.status_code == 409, refused.text
    message = re.search(r'id="action-error"[^>]*>([^<]*)<', refused.text).group(1)
    assert message.startswith("followup refused:") and "reopen" in message
    assert 'value="answer: more, please"' in refused.text  # what was typed is kept
    assert run_of(daemon, batch["id"], run["id"])["attempt"] == 1  # nothing changed
    reopened = post(
        web, client, f"{url}/followup", {"text": "answer: more, please", "reopen": "on"}
    )
    assert reopened.status_code == 303, reopened.text
    wait_for(
        lambda: (lambda r: r["attempt"] == 2 and r["state"] == "succeeded")(
            run_of(daemon, batch["id"], run["id"])
        ),
        timeout=90,
        what="the follow-up to succeed",
    )
    assert run_of(daemon, batch["id"], run["id"])["attempts"][1]["kind"] == "followup"


def test_cancel_a_batch_from_its_page(web, daemon):
    batch = repeated(daemon, SLOW, runs=2)
    client = web.client()
    url = f"/batches/{batch['id']}"
    assert f'action="{url}/cancel"' in client.get(url).text
    cancelled = post(web, client, f"{url}/cancel")
    assert cancelled.status_code == 303 and cancelled.headers["location"] == url
    ended = wait_batch(daemon, batch["id"])
    assert ended["state"] == "cancelled" and {r["state"] for r in ended["runs"]} == {"cancelled"}
    assert f'action="{url}/cancel"' not in client.get(url).text  # ended: no Cancel any more


def test_clean_up_keeps_a_dirty_worktree_until_forced(web, daemon):
    batch = wait_batch(daemon, repeated(daemon, "answer: hi", runs=2)["id"])
    assert batch["state"] == "completed", batch["state_reason"]
    dirty, clean = (Path(r["worktree"]) for r in batch["runs"])
    (dirty / "scratch.txt").write_text("not committed\n")
    client = web.client()
    url = f"/batches/{batch['id']}/clean"
    preview = client.get(url).text
    rows = dict(re.findall(r'<td class="path">([^<]+)</td>.*?<td>(\w+)</td></tr>', preview, re.S))
    assert rows == {str(dirty): "needs_force", str(clean): "remove"}, rows
    assert dirty.exists() and clean.exists()  # a preview removes nothing
    confirmed = post(web, client, url)
    assert confirmed.status_code == 200
    rows = dict(
        re.findall(r'<td class="path">([^<]+)</td>.*?<td>(\w+)</td></tr>', confirmed.text, re.S)
    )
    assert rows == {str(dirty): "needs_force", str(clean): "removed"}, rows
    assert dirty.exists() and (dirty / "scratch.txt").exists() and not clean.exists()
    forced = post(web, client, url, {"force": "on"})
    rows = dict(
        re.findall(r'<td class="path">([^<]+)</td>.*?<td>(\w+)</td></tr>', forced.text, re.S)
    )
    assert rows[str(dirty)] == "removed" and not dirty.exists()


def test_a_tampered_answer_shows_the_integrity_failure_not_the_answer(web, daemon, workdir):
    agent = daemon.call("start", {"task": "answer: the truth", "workdir": str(workdir)})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    client = web.client()
    assert 'badge ok">verified' in client.get(f"/agents/{agent['id']}").text
    Path(daemon.call("answer", {"agent_id": agent["id"]})["path"]).write_text("a lie")
    page = client.get(f"/agents/{agent['id']}").text
    answer = page[page.index('<div id="answer"') :]
    assert 'badge bad">integrity failure' in answer and "does not match" in answer
    assert "verified" not in answer and "a lie" not in answer
    assert daemon.call("agent", {"agent_id": agent["id"]})["answer_verified"] is False


def test_a_run_page_under_another_batchs_id_is_not_found(web, daemon):
    first = wait_batch(daemon, repeated(daemon, "answer: one", runs=1)["id"])
    second = wait_batch(daemon, repeated(daemon, "answer: two", runs=1)["id"])
    client = web.client()
    run = first["runs"][0]
    assert client.get(f"/batches/{first['id']}/runs/{run['id']}").status_code == 200
    wrong = client.get(f"/batches/{second['id']}/runs/{run['id']}")
    assert wrong.status_code == 404 and "RunNotFound" in wrong.text
