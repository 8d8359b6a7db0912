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


def test_the_batch_page_shows_its_title_prompt_and_each_runs_result(web, daemon):
    """Issue 37: the title and prompt lead; each run shows its answer's start, its diff stats,
    tokens and how its rank came about; a candidate with nothing to land offers no Merge."""
    repo = make_repo()
    prompt = "<b>Add</b> the feature\nwrite: feature.txt = a feature\ncommit: add the feature"
    started = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "title": "Feature <i>pick</i>",
            "project": str(repo),
            "runs": 2,
            "reviewers": 1,
            "runtime": "demo",
            "prompt": prompt,
            "review_prompt": "score: 80\nscore_reason: tidy <script>x</script>",
        },
    )
    batch = wait_batch(daemon, started["id"])
    assert batch["state"] == "completed", batch["state_reason"]
    client = web.client()
    page = client.get(f"/batches/{batch['id']}").text
    assert "<h1>Feature &lt;i&gt;pick&lt;/i&gt; " in page  # escaped, never markup
    assert html.escape(prompt) in page
    first = next(r for r in _runs(batch, "candidate") if r["rank"] == 1)
    result = page.split(f'data-result="{first["id"]}">', 1)[1].split("</td>", 1)[0]
    assert html.escape(first["answer_excerpt"]) in result
    assert "1 file +1 −0 · 1 commit" in result
    assert f"{first['usage']['total_tokens']} tokens" in result
    assert "Why #1: score 80" in result
    assert "tidy &lt;script&gt;x&lt;/script&gt;" in page  # a reviewer's reason, escaped
    assert 'id="ranking-rule"' in page
    assert f'href="/batches/{batch["id"]}/runs/{first["id"]}/merge"' in page
    home = client.get("/").text
    assert 'class="batch-title">Feature &lt;i&gt;pick&lt;/i&gt;</div>' in home

    # A candidate that never committed (it failed) is offered no Merge.
    failed = wait_batch(
        daemon,
        daemon.call(
            "batch_start",
            {
                "workflow": "ranked",
                "project": str(make_repo()),
                "runs": 1,
                "reviewers": 1,
                "runtime": "demo",
                "prompt": "answer: no commit",
                "review_prompt": "score: 1",
            },
        )["id"],
    )
    assert failed["state"] == "blocked"
    page = client.get(f"/batches/{failed['id']}").text
    assert "/merge" not in page
