"""The batch page per workflow: validated shows the validator's verdict beside each worker;
generated lists the tasks its generator made; a run's Changes tab cuts a large diff with a note."""

import html
import re
from pathlib import Path

from tests.batch_harness import make_repo, wait_batch


def _runs(batch, stage):
    return [r for r in batch["runs"] if r["stage"] == stage]


def test_validated_batch_page_shows_each_workers_verdict_and_the_winner(web, daemon):
    repo = make_repo()
    started = daemon.call(
        "batch_start",
        {
            "workflow": "validated",
            "project": str(repo),
            "runs": 2,
            "runtime": "demo",
            "prompt": "write: answer.txt = 42\nresult: auto",
            "validator_prompt": "verdict: auto",
        },
    )
    batch = wait_batch(daemon, started["id"])
    assert batch["state"] == "completed", batch["state_reason"]
    verdict = _runs(batch, "validator")[0]["result"]
    page = web.client().get(f"/batches/{batch['id']}").text
    assert "Workers and the validator's verdict" in page
    assert re.search(r'id="winner">worker (\d+)<', page).group(1) == str(verdict["winner"])
    rows = re.findall(
        r'<tr data-run="(rn_[0-9a-z]+)" data-state="succeeded"( class="winner")?>(.*?)</tr>',
        page,
        re.S,
    )
    workers = {w["id"]: w for w in _runs(batch, "worker")}
    assert {row[0] for row in rows} == set(workers)
    for run_id, winner_class, cells in rows:
        index = workers[run_id]["index"]
        mine = next(v for v in verdict["workers"] if v["worker"] == index)
        assert ('badge ok">pass' if mine["pass"] else 'badge bad">fail') in cells
        assert f'<td class="reason">{html.escape(mine["reason"])}</td>' in cells
        assert bool(winner_class) == (index == verdict["winner"])


def test_validated_batch_page_before_the_verdict_says_the_validator_waits(web, daemon):
    repo = make_repo()
    started = daemon.call(
        "batch_start",
        {
            "workflow": "validated",
            "project": str(repo),
            "runs": 1,
            "runtime": "demo",
            "prompt": "answer: forgot to submit",
        },
    )
    batch = wait_batch(daemon, started["id"])
    assert batch["state"] == "blocked" and not _runs(batch, "validator")
    page = web.client().get(f"/batches/{batch['id']}").text
    assert (
        "The validator starts once every worker has succeeded." in page
        and 'id="winner"' not in page
    )


def test_generated_batch_page_lists_the_generated_tasks_with_their_runs(web, daemon):
    repo = make_repo()
    started = daemon.call(
        "batch_start",
        {
            "workflow": "generated",
            "project": str(repo),
            "runs": 3,
            "runtime": "demo",
            "prompt": "tasks: auto",
        },
    )
    batch = wait_batch(daemon, started["id"])
    assert batch["state"] == "completed", batch["state_reason"]
    tasks = _runs(batch, "generator")[0]["result"]
    page = web.client().get(f"/batches/{batch['id']}").text
    assert "<h2>Generated tasks</h2>" in page
    listed = re.findall(
        r'<li class="task"><strong>([^<]*)</strong> — <a href="/batches/[^/]+/runs/(rn_[0-9a-z]+)">',
        page,
    )
    workers = {w["index"]: w["id"] for w in _runs(batch, "worker")}
    assert listed == [(html.escape(t["title"]), workers[n]) for n, t in enumerate(tasks, start=1)]


def test_a_large_diff_is_cut_with_a_note_on_the_changes_tab(web, daemon):
    """Past git.MAX_DIFF_BYTES the Changes tab shows the head of the diff and says it was cut."""
    from agent_run.system.git import MAX_DIFF_BYTES

    repo = make_repo()
    started = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": 1,
            "runtime": "demo",
            "prompt": "answer: done",
        },
    )
    batch = wait_batch(daemon, started["id"])
    assert batch["state"] == "completed", batch["state_reason"]
    run = batch["runs"][0]
    client = web.client()
    tab = f"/batches/{batch['id']}/runs/{run['id']}?tab=changes"
    assert "The diff was truncated." not in client.get(tab).text
    line = "an uncommitted line of a large change\n"
    big = line * (MAX_DIFF_BYTES // len(line) + 100)
    (Path(run["worktree"]) / "README.md").write_text(big)
    changes = client.get(tab).text
    assert "README.md" in changes and "an uncommitted line" in changes
    assert "The diff was truncated." in changes
    assert changes.count("an uncommitted line") < big.count("\n")
