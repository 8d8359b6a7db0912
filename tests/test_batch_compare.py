"""`runs_compare` and `agent-run batch compare` (issue 37, item 3): 2 to 4 runs side by side,
their answers, scores and reasons, and each changed file's diff per run, bounded and marked
where cut; runs of another batch or named twice are refused."""

import json

import pytest

from agent_run.domain.compare_models import FILE_DIFF_CHARS
from agent_run.domain.errors import DomainError
from tests.batch_harness import BatchProject, runs_of
from tests.harness import cli

# Candidate 1 appends 3 lines to the README, candidate 2 3,000 (a diff past the file bound).
PROMPT = (
    'shell: n="${PWD##*-}"; if [ "$n" = 2 ]; then seq 3000 >> README.md; '
    "else seq 3 >> README.md; fi\n"
    "write: feature.txt = a feature\ncommit: add the feature\nanswer: feature added"
)


@pytest.fixture
def ranked(batch_project: BatchProject) -> dict:
    done = batch_project.finish(
        "ranked", runs=2, reviewers=1, prompt=PROMPT, review_prompt="score: 70"
    )
    assert done["state"] == "completed", done["state_reason"]
    return done


def test_two_candidates_side_by_side(batch_project: BatchProject, ranked: dict) -> None:
    daemon = batch_project.daemon
    one, two = runs_of(ranked, "candidate")
    compared = daemon.call(
        "runs_compare", {"batch_id": ranked["id"], "run_ids": [two["id"], one["id"]]}
    )
    assert [c["run"]["id"] for c in compared["runs"]] == [two["id"], one["id"]]
    assert [c["answer"] for c in compared["runs"]] == ["feature added", "feature added"]
    assert [c["run"]["rank"] for c in compared["runs"]] == [2, 1]  # same score: fewer lines
    assert compared["runs"][0]["run"]["reviews"][0]["score"] == 70
    files = {f["path"]: f["sides"] for f in compared["files"]}
    assert sorted(files) == ["README.md", "feature.txt"]
    readme_two, readme_one = files["README.md"]
    assert (readme_one["run_id"], readme_one["added"], readme_one["truncated"]) == (
        one["id"],
        3,
        False,
    )
    assert readme_one["diff"].startswith("diff --git a/README.md b/README.md")
    assert readme_one["diff"].rstrip().endswith("+3")
    # 3,000 lines: the file's diff is cut at its bound, and says so
    assert (readme_two["added"], readme_two["truncated"]) == (3000, True)
    assert len(readme_two["diff"]) < FILE_DIFF_CHARS + 100
    assert readme_two["diff"].endswith("the rest of this file's diff is left out)")
    feature = files["feature.txt"]
    assert [s["changed"] for s in feature] == [True, True]
    assert feature[0]["diff"] == feature[1]["diff"]


def test_compare_refuses_runs_it_cannot_put_side_by_side(
    batch_project: BatchProject, ranked: dict
) -> None:
    daemon = batch_project.daemon
    one, two = runs_of(ranked, "candidate")
    other = batch_project.finish("repeated", runs=1, prompt="answer: other")["runs"][0]
    for run_ids, code, field in (
        ([one["id"], other["id"]], "InvalidRequest", "run_ids.1"),
        ([one["id"], one["id"]], "InvalidRequest", "run_ids"),
        ([one["id"]], "InvalidParams", "run_ids"),  # the params model: 2 to 4
        (
            [one["id"], two["id"], *runs_of(ranked, "reviewer")[:2], other["id"]],
            "InvalidParams",
            "run_ids",
        ),
    ):
        with pytest.raises(DomainError) as refused:
            daemon.call("runs_compare", {"batch_id": ranked["id"], "run_ids": run_ids})
        assert (refused.value.code, refused.value.field) == (code, field)


def test_batch_compare_on_the_command_line(batch_project: BatchProject, ranked: dict) -> None:
    home = batch_project.daemon.home
    one, two = runs_of(ranked, "candidate")
    listed = cli(home, "batch", "compare", ranked["id"], one["id"], two["id"])
    assert listed.returncode == 0, listed.stderr
    assert [r["run"]["id"] for r in json.loads(listed.stdout)["runs"]] == [one["id"], two["id"]]
    text = cli(home, "--format", "text", "batch", "compare", ranked["id"], one["id"], two["id"])
    assert text.returncode == 0, text.stderr
    assert f"[1] {one['id']}  candidate 1  succeeded  rank #1  score 70" in text.stdout
    assert "file README.md" in text.stdout and "--- [2] +3000 -0 (cut)" in text.stdout
    missing = cli(home, "batch", "compare", ranked["id"], one["id"])
    assert missing.returncode != 0 and "run_ids" in missing.stdout + missing.stderr
