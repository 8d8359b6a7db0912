"""The web UI's Merge page: the dry run first (GET), the merge on a CSRF-checked POST, a conflict
shown with its paths and a pre-filled follow-up; against a real daemon, web process and git repo."""

import html
from pathlib import Path

from tests.batch_harness import git, runs_of
from tests.test_run_merge import commit_in, settled_runs, snapshot


def test_merge_page_shows_the_dry_run_then_merges_on_a_csrf_checked_post(
    web, daemon, batch_project
):
    repo = batch_project.repo
    done, [run, clashing] = settled_runs(batch_project, 2)
    commit_in(Path(run["worktree"]), {"README.md": "# from the web\n"}, "web change")
    commit_in(Path(clashing["worktree"]), {"README.md": "# clashing\n"}, "clash")
    client = web.client()
    base = git(repo, "rev-parse", "main")
    run_url = f"/batches/{done['id']}/runs/{run['id']}"
    assert f'href="{run_url}/merge"' in client.get(run_url).text

    preview = client.get(f"{run_url}/merge")
    assert preview.status_code == 200 and "would merge cleanly into main" in preview.text
    assert 'id="merge-form"' in preview.text and git(repo, "rev-parse", "main") == base

    no_csrf = client.post(f"{run_url}/merge", data={}, headers={"origin": web.origin})
    assert no_csrf.status_code == 403 and git(repo, "rev-parse", "main") == base

    (repo / "README.md").write_text("# <b>dirty</b>\n")
    refused = client.get(f"{run_url}/merge?into=main")
    assert refused.status_code == 409 and "uncommitted changes" in html.unescape(refused.text)
    git(repo, "checkout", "--", "README.md")

    merged = client.post(
        f"{run_url}/merge",
        data={"strategy": "squash", "csrf": web.csrf(client)},
        headers={"origin": web.origin},
    )
    new = git(repo, "rev-parse", "main")
    assert merged.status_code == 200 and new != base and new in merged.text
    assert (repo / "README.md").read_text() == "# from the web\n"
    assert "merged into main" in client.get(f"/batches/{done['id']}").text
    assert new[:12] in client.get(run_url).text

    before = snapshot(repo, Path(clashing["worktree"]))
    conflict = client.get(f"/batches/{done['id']}/runs/{clashing['id']}/merge").text
    assert "README.md" in conflict and 'id="merge-form"' not in conflict
    assert 'name="text" value="Merge main into your branch' in conflict
    assert snapshot(repo, Path(clashing["worktree"])) == before

    [after] = [
        r
        for r in runs_of(daemon.call("batch", {"batch_id": done["id"]}), "worker")
        if r["id"] == run["id"]
    ]
    assert after["merged_sha"] == new
