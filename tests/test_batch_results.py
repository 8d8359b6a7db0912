"""Each run's result in the batch view (issue 37, items 2, 4 and 5): the answer excerpt and diff
stats measured once when a run settles, duration, tokens and cost, a running run's activity;
how a ranked batch's order came about, ties included; and unblocking a staged batch by
stopping its failed run, which the next stage then goes on without."""

import json
from pathlib import Path

from agent_run.domain.run_results import Candidate, rank_candidates
from tests.batch_harness import BatchProject, git, runs_of, wait_batch
from tests.harness import db_rows, wait_for

CHANGE = (
    "write: README.md = # changed\nwrite: notes.txt = new\ntokens: 10\ncost: 0.01\n"
    "answer:   I changed\tthe README   and added notes.txt"
)


def test_each_run_carries_its_result_measured_once(batch_project: BatchProject) -> None:
    daemon = batch_project.daemon
    done = batch_project.finish("repeated", runs=2, prompt=CHANGE)
    assert done["state"] == "completed"
    for run in done["runs"]:
        assert run["answer_excerpt"] == "I changed the README and added notes.txt"
        # README.md changed (tracked, not committed), notes.txt new (untracked): both uncommitted
        assert run["diff"] == {
            "files": 1,
            "insertions": 1,
            "deletions": 1,
            "commits": 0,
            "uncommitted_files": 2,
            "head": git(batch_project.repo, "rev-parse", "HEAD"),
        }
        assert (run["usage"]["total_tokens"], run["usage"]["cost_usd"]) == (20, 0.01)
        assert run["duration_seconds"] > 0
        assert run["can_merge"] is False  # nothing committed: nothing for run_merge to land
    # Measured once and stored: the view reads the row, it runs no git (a worktree edited
    # after the run settled does not change it).
    worktree = Path(done["runs"][0]["worktree"])
    (worktree / "README.md").write_text("# edited by hand\nmore\n")
    again = daemon.call("batch", {"batch_id": done["id"]})
    assert again["runs"][0]["diff"] == done["runs"][0]["diff"]
    rows = db_rows(daemon.home, "SELECT measured_attempt, attempt FROM batch_runs")
    assert {(r["measured_attempt"], r["attempt"]) for r in rows} == {(1, 1)}


def test_a_failed_run_is_measured_too(batch_project: BatchProject) -> None:
    """The scheduler's sweep measures the runs that settle without being judged."""
    daemon = batch_project.daemon
    failed = batch_project.finish("repeated", runs=1, prompt="write: README.md = x\nfail: auth")
    assert failed["state"] == "failed"

    def measured() -> dict | None:
        run = daemon.call("batch", {"batch_id": failed["id"]})["runs"][0]
        return run if run["diff"] is not None else None

    run = wait_for(measured, timeout=60, what="the failed run measured")
    assert (run["diff"]["files"], run["diff"]["uncommitted_files"]) == (1, 1)
    assert run["answer_excerpt"] is None  # no sealed answer


def test_a_running_run_says_what_it_is_doing_and_since_when(batch_project: BatchProject) -> None:
    daemon = batch_project.daemon
    batch = batch_project.start("repeated", runs=1, prompt="steps: 400\nstep_seconds: 0.05")

    def doing() -> dict | None:
        run = daemon.call("batch", {"batch_id": batch["id"]})["runs"][0]
        return run["activity"] if run["activity"] else None

    activity = wait_for(doing, timeout=60, what="the run's activity")
    assert activity["kind"] == "message" and activity["text"].startswith("step ")
    assert activity["text"].endswith("/400") and activity["since"] > batch["created_at"]
    daemon.call("batch_cancel", {"batch_id": batch["id"]})
    ended = wait_batch(daemon, batch["id"])
    assert ended["runs"][0]["activity"] is None  # only a running run has one


# -- why this order ------------------------------------------------------------------------


def test_the_ranking_rule_orders_ties_and_says_why() -> None:
    def cand(index: int, scores: tuple[float, ...], verify=None, lines=None) -> Candidate:
        return Candidate(f"rn_{index}", index, scores, verify, lines)

    ranked = rank_candidates(
        [
            cand(1, (99, 99), True, 40),
            cand(2, (100, 100), False, 1),  # the best score, but its verify failed: last
            cand(3, (99, 99), True, 12),  # ties with 1 on score, fewer lines: ahead
            cand(4, (), True, 0),  # no review: after every scored candidate
            cand(5, (99, 99), True, 12),  # ties with 3 on score and lines: the later one after
        ]
    )
    assert [(r.run_id, r.rank) for r in ranked] == [
        ("rn_3", 1),
        ("rn_5", 2),
        ("rn_1", 3),
        ("rn_4", 4),
        ("rn_2", 5),
    ]
    reasons = {r.run_id: r.reason for r in ranked}
    assert reasons["rn_3"] == (
        "score 99 (mean of 2 review(s): 99, 99); verify passed; tied with candidate 5 on score "
        "and lines changed, before it as the earlier candidate"
    )
    assert (
        "tied with candidate 1 on score, before it on lines changed (12 vs 40)" in reasons["rn_5"]
    )
    assert "tied with candidate 5 on score, after it on lines changed (40 vs 12)" in reasons["rn_1"]
    assert reasons["rn_4"].startswith("no review score")
    assert "verify FAILED: ranked after the rest" in reasons["rn_2"]


def test_equal_scores_rank_by_fewer_lines_changed_in_the_batch_view(
    batch_project: BatchProject,
) -> None:
    """Three candidates scored alike; candidate N also appends 4 - N lines to the README, so
    the last one changed the fewest lines and ranks first, and each says why."""
    prompt = (
        'shell: n="${PWD##*-}"; seq $((4 - n)) >> README.md\n'
        "write: feature.txt = a feature\ncommit: add the feature"
    )
    done = batch_project.finish(
        "ranked", runs=3, reviewers=1, prompt=prompt, review_prompt="score: 50"
    )
    assert done["state"] == "completed", done["state_reason"]
    assert done["ranking_rule"].startswith("a candidate whose verify_command failed")
    candidates = {c["index"]: c for c in runs_of(done, "candidate")}
    assert {i: c["diff"]["insertions"] + c["diff"]["deletions"] for i, c in candidates.items()} == {
        1: 4,
        2: 3,
        3: 2,
    }
    assert {i: c["rank"] for i, c in candidates.items()} == {3: 1, 2: 2, 1: 3}
    assert candidates[3]["rank_reason"] == (
        "score 50 (mean of 1 review(s): 50); tied with candidate 2 on score, before it on "
        "lines changed (2 vs 3)"
    )
    assert [(r["score"], r["reason"]) for r in candidates[1]["reviews"]] == [(50, "demo review")]
    assert all(c["can_merge"] for c in candidates.values())  # each committed once
    # Measured by the judge, in the write that made each run succeeded (before any ranking
    # could read it), never by a write of its own afterwards.
    events = db_rows(
        batch_project.daemon.home,
        "SELECT data FROM events WHERE kind = 'batch' AND agent_id = ?",
        (done["id"],),
    )
    measuring = [json.loads(e["data"]) for e in events if "measured_attempt" in e["data"]]
    assert len(measuring) == 6 and all(m["state"] == "succeeded" for m in measuring), measuring


# -- unblock by stopping ---------------------------------------------------------------------


def _fail_then_rerun_all_but_the_second(bp: BatchProject, workflow: str, **params) -> dict:
    """Every main-stage run fails on a missing GO file; runs 1 and 3 get one and are rerun,
    run 2 stays failed: the batch is blocked on it, the others done."""
    daemon = bp.daemon
    batch = bp.start(workflow, runs=3, **params)

    def all_failed() -> dict | None:  # blocked at the first failure: wait for the other two
        view = daemon.call("batch", {"batch_id": batch["id"]})
        return view if [r["state"] for r in view["runs"]] == ["failed"] * 3 else None

    blocked = wait_for(all_failed, timeout=120, what="every run failed")
    assert blocked["state"] == "blocked"
    first = [r for r in blocked["runs"] if r["index"] in (1, 3)]
    for run in first:
        (Path(run["workdir"]) / "GO").write_text("go\n")
        daemon.call("run_rerun", {"run_id": run["id"]})
    return batch


def test_stopping_a_failed_candidate_unblocks_the_ranking(batch_project: BatchProject) -> None:
    daemon = batch_project.daemon
    batch = _fail_then_rerun_all_but_the_second(
        batch_project,
        "ranked",
        reviewers=1,
        prompt="require: GO\nwrite: feature.txt = a feature\ncommit: add the feature",
        review_prompt="score: 60",
    )

    def reviewed_but_blocked() -> dict | None:
        view = daemon.call("batch", {"batch_id": batch["id"]})
        done = [r for r in runs_of(view, "reviewer") if r["state"] == "succeeded"]
        return view if view["state"] == "blocked" and len(done) == 2 else None

    blocked = wait_for(reviewed_but_blocked, timeout=120, what="1 and 3 reviewed, still blocked")
    second = next(r for r in runs_of(blocked, "candidate") if r["index"] == 2)
    assert second["state"] == "failed"
    assert blocked["state_reason"].endswith(
        "rerun or resume it to continue, or stop it to go on without it"
    )
    stopped = daemon.call("run_stop", {"run_id": second["id"]})
    assert stopped["message"].startswith("stopped: set aside")
    assert stopped["run"]["state"] == "cancelled"
    assert stopped["run"]["failure"].startswith("stopped after it failed: error_reply")
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "completed", done["state_reason"]
    ranks = {c["index"]: (c["rank"], c["score"]) for c in runs_of(done, "candidate")}
    assert ranks == {1: (1, 60.0), 2: (None, None), 3: (2, 60.0)}


def test_stopping_a_failed_worker_lets_the_validator_judge_the_rest(
    batch_project: BatchProject,
) -> None:
    daemon = batch_project.daemon
    (batch_project.repo / "GO").write_text("go\n")  # the validator's folder: its prompt says it
    batch = _fail_then_rerun_all_but_the_second(
        batch_project,
        "validated",
        prompt="require: GO\nwrite: answer.txt = 42\nresult: auto",
        validator_prompt="verdict: auto",
    )

    def two_done() -> dict | None:
        view = daemon.call("batch", {"batch_id": batch["id"]})
        done = [r for r in runs_of(view, "worker") if r["state"] == "succeeded"]
        return view if len(done) == 2 else None

    view = wait_for(two_done, timeout=120, what="workers 1 and 3 done")
    assert view["state"] == "blocked" and runs_of(view, "validator") == []
    second = next(r for r in runs_of(view, "worker") if r["index"] == 2)
    daemon.call("run_stop", {"run_id": second["id"]})
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "completed", done["state_reason"]
    validator = runs_of(done, "validator")[0]
    assert [w["worker"] for w in validator["result"]["workers"]] == [1, 3]
    assert (
        "worker 2:"
        not in db_rows(
            daemon.home, "SELECT own_prompt FROM batch_runs WHERE id = ?", (validator["id"],)
        )[0]["own_prompt"]
    )


def test_stopping_a_failed_run_of_a_repeated_batch_changes_nothing(
    batch_project: BatchProject,
) -> None:
    """Only a run that blocks a staged batch is set aside; a repeated batch never blocks."""
    daemon = batch_project.daemon
    failed = batch_project.finish("repeated", runs=1, prompt="fail: auth")
    result = daemon.call("run_stop", {"run_id": failed["runs"][0]["id"]})
    assert result["message"] == "run is failed; nothing to stop"
    assert daemon.call("batch", {"batch_id": failed["id"]})["state"] == "failed"
