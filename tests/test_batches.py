"""Batches on the demo engine, end to end, in real git repositories."""

import json
import os
from pathlib import Path

import pytest

from agent_run.domain.errors import DomainError
from tests.batch_harness import CANDIDATE, git, make_repo, runs_of, wait_batch
from tests.harness import db_rows


def plan_of(daemon, agent_id):
    """The stored execution plan of the agent's (first) execution."""
    row = db_rows(daemon.home, "SELECT plan_json FROM executions WHERE agent_id = ?", (agent_id,))
    return json.loads(row[0]["plan_json"])


def test_repeated_runs_each_in_its_own_named_worktree_and_keeps_them(batch_project):
    repo = batch_project.repo
    batch = batch_project.start(
        "repeated", runs=3, prompt="write: out.txt = done\nanswer: wrote out.txt"
    )
    assert batch["base_sha"] == git(repo, "rev-parse", "HEAD")
    done = wait_batch(batch_project.daemon, batch["id"])
    assert done["state"] == "completed", done
    workers = runs_of(done, "worker")
    assert [r["state"] for r in workers] == ["succeeded"] * 3
    short = batch["id"].removeprefix("bt_")[-8:]
    for n, run in enumerate(workers, start=1):
        path = Path(run["worktree"])
        assert path.name == f"proj-main-{short}-{n}" and path.parent == repo.parent
        assert (path / "out.txt").read_text() == "done\n"
        assert git(repo, "rev-parse", run["branch"]) == batch["base_sha"]
    assert len({r["agent_id"] for r in workers}) == 3


def test_generated_makes_exactly_n_tasks_then_one_run_per_task(batch_project):
    done = batch_project.finish("generated", runs=3, prompt="tasks: auto")
    assert done["state"] == "completed", done
    generator = runs_of(done, "generator")[0]
    assert generator["worktree"] is None and generator["workdir"] == str(batch_project.repo)
    assert [t["title"] for t in generator["result"]] == ["task 1", "task 2", "task 3"]
    workers = runs_of(done, "worker")
    assert [w["title"] for w in workers] == ["task 1", "task 2", "task 3"]
    assert all((Path(w["worktree"]) / f"task{w['index']}.txt").exists() for w in workers)


def test_generator_malformed_reply_fails_as_error_reply_after_one_retry(batch_project):
    done = batch_project.finish("generated", states=("failed",), runs=2, prompt="tasks: broken")
    generator = runs_of(done, "generator")[0]
    assert generator["failure"].startswith("error_reply")
    assert [a["kind"] for a in generator["attempts"]] == ["start", "rerun"]
    assert runs_of(done, "worker") == []


def test_ranked_scores_by_reviewers_and_ranks_failed_verification_last(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    done = batch_project.finish(
        "ranked",
        runs=3,
        reviewers=2,
        prompt=CANDIDATE,
        review_prompt="score: auto",
        concurrency=6,
        verify_command='case "$PWD" in *-2) echo broken; exit 1;; esac; test -f feature.txt',
    )
    assert done["state"] == "completed", done
    candidates = runs_of(done, "candidate")
    reviewers = runs_of(done, "reviewer")
    assert len(reviewers) == 6 and all(r["state"] == "succeeded" for r in reviewers)
    for c in candidates:
        scores = [r["result"]["score"] for r in reviewers if r["parent_run_id"] == c["id"]]
        assert c["score"] == pytest.approx(sum(scores) / len(scores))
        assert len(c["result"]["commits"]) == 1
        assert git(repo, "log", "-1", "--format=%s", c["branch"]) == "add the feature"
    by_rank = sorted(candidates, key=lambda c: c["rank"])
    assert by_rank[-1]["index"] == 2 and by_rank[-1]["verify_passed"] is False
    assert "broken" in by_rank[-1]["verify_output"]
    assert by_rank[0]["score"] >= by_rank[1]["score"]
    # Reviewers ran read-only in their candidate's worktree.
    for r in reviewers:
        parent = next(c for c in candidates if c["id"] == r["parent_run_id"])
        assert r["workdir"] == parent["workdir"] and r["worktree"] is None
        plan = plan_of(daemon, r["agent_id"])
        assert plan["profile"] == "read_only" and "submit_score" in plan["worker_tools"]


def test_failed_candidate_blocks_the_batch_and_a_rerun_clears_it(batch_project):
    daemon = batch_project.daemon
    batch = batch_project.start_ranked_pair("score: 70", prompt=f"require: go.flag\n{CANDIDATE}")
    blocked = wait_batch(daemon, batch["id"], states=("blocked",))
    candidate = runs_of(blocked, "candidate")[0]
    assert candidate["state"] == "failed" and "error_reply" in candidate["failure"]
    assert "rerun" in blocked["state_reason"]
    (Path(candidate["worktree"]) / "go.flag").write_text("go\n")
    rerun = daemon.call("run_rerun", {"run_id": candidate["id"]})
    assert rerun["run"]["attempt"] == 2
    done = wait_batch(daemon, batch["id"], states=("completed",))
    final = runs_of(done, "candidate")[0]
    assert [a["kind"] for a in final["attempts"]] == ["start", "rerun"]
    assert final["attempts"][0]["agent_id"] != final["attempts"][1]["agent_id"]
    assert daemon.call("agent", {"agent_id": final["attempts"][0]["agent_id"]})["state"] == "failed"
    assert final["rank"] == 1 and final["score"] == 70


def test_validated_workers_submit_results_and_the_validator_reads_every_worktree(batch_project):
    done = batch_project.finish(
        "validated",
        runs=2,
        prompt="write: answer.txt = 42\nresult: auto",
        validator_prompt="verdict: auto",
    )
    assert done["state"] == "completed", done
    workers = runs_of(done, "worker")
    assert all(w["result"]["files"][0]["path"] == "answer.txt" for w in workers)
    validator = runs_of(done, "validator")[0]
    assert validator["result"]["winner"] == 1
    assert [v["pass"] for v in validator["result"]["workers"]] == [True, True]
    plan = plan_of(batch_project.daemon, validator["agent_id"])
    assert plan["profile"] == "read_only"
    assert sorted(plan["read_roots"]) == sorted(str(Path(w["workdir"]).resolve()) for w in workers)


def test_validated_worker_without_submit_result_fails_and_blocks(batch_project):
    blocked = batch_project.finish(
        "validated",
        states=("blocked",),
        runs=1,
        prompt="answer: I forgot to submit",
        validator_prompt="verdict: auto",
    )
    worker = runs_of(blocked, "worker")[0]
    assert worker["failure"].startswith("submit_result: called 0 times")
    assert runs_of(blocked, "validator") == []


def test_base_stays_pinned_when_the_branch_moves_during_the_batch(batch_project):
    repo = batch_project.repo
    batch = batch_project.start(
        "generated", runs=2, prompt="steps: 15\nstep_seconds: 0.1\ntasks: auto"
    )
    pinned = batch["base_sha"]
    (repo / "moved.txt").write_text("the branch moved on\n")
    git(repo, "add", "moved.txt")
    git(repo, "commit", "-q", "-m", "move main")
    assert git(repo, "rev-parse", "main") != pinned
    done = wait_batch(batch_project.daemon, batch["id"])
    assert done["state"] == "completed", done
    for worker in runs_of(done, "worker"):
        assert git(Path(worker["worktree"]), "rev-parse", "HEAD") == pinned
        assert not (Path(worker["worktree"]) / "moved.txt").exists()


def test_subdirectory_project_maps_to_the_same_subdirectory_in_each_worktree(batch_project):
    repo = batch_project.repo
    (repo / "services" / "api").mkdir(parents=True)
    (repo / "services" / "api" / "app.py").write_text("print('api')\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "a service")
    batch = batch_project.start(
        "repeated",
        project=str(repo / "services" / "api"),
        runs=2,
        prompt="write: notes.txt = from the subdir\nanswer: ok",
    )
    assert batch["project_root"] == str(repo) and batch["project_subdir"] == "services/api"
    done = wait_batch(batch_project.daemon, batch["id"])
    for worker in runs_of(done, "worker"):
        assert worker["workdir"] == str(Path(worker["worktree"]) / "services" / "api")
        assert (Path(worker["workdir"]) / "notes.txt").read_text() == "from the subdir\n"
        assert (Path(worker["workdir"]) / "app.py").exists()
        assert Path(worker["worktree"]).name.startswith("api-main-")


def test_review_shows_committed_uncommitted_and_untracked_changes(batch_project):
    daemon = batch_project.daemon
    batch = batch_project.start_ranked_pair()
    done = wait_batch(daemon, batch["id"])
    worktree = Path(runs_of(done, "candidate")[0]["worktree"])
    (worktree / "README.md").write_text("# project\nedited, not committed\n")
    (worktree / "scratch.txt").write_text("an untracked note\n")
    review = daemon.call("batch_review", {"batch_id": batch["id"]})
    [run] = [r for r in review["runs"] if r["stage"] == "candidate"]
    assert len(run["commits"]) == 1 and run["commits"][0].endswith("add the feature")
    assert "+a feature" in run["diff"] and "+edited, not committed" in run["diff"]
    assert run["untracked"] == [{"path": "scratch.txt", "preview": "an untracked note\n"}]


def test_clean_previews_then_refuses_unmerged_work_without_force(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    batch = batch_project.start_ranked_pair()
    done = wait_batch(daemon, batch["id"])
    candidate = runs_of(done, "candidate")[0]
    preview = daemon.call("batch_clean", {"batch_id": batch["id"]})
    assert preview["confirmed"] is False
    [item] = preview["items"]
    assert item["action"] == "needs_force" and item["unmerged_commits"] == 1
    refused = daemon.call("batch_clean", {"batch_id": batch["id"], "confirm": True})
    assert refused["items"][0]["action"] == "needs_force"
    assert Path(candidate["worktree"]).exists() and git(
        repo, "branch", "--list", candidate["branch"]
    )
    forced = daemon.call("batch_clean", {"batch_id": batch["id"], "confirm": True, "force": True})
    assert forced["items"][0]["action"] == "removed"
    assert not Path(candidate["worktree"]).exists()
    assert git(repo, "branch", "--list", candidate["branch"]) == ""


def test_clean_removes_merged_clean_worktrees_on_confirm(batch_project):
    done = batch_project.finish("repeated", runs=2, prompt="answer: nothing changed")
    result = batch_project.daemon.call("batch_clean", {"batch_id": done["id"], "confirm": True})
    assert [i["action"] for i in result["items"]] == ["removed", "removed"]
    assert not any(Path(r["worktree"]).exists() for r in runs_of(done, "worker"))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"runs": 0}, "runs"),
        ({"runs": 51}, "runs"),
        ({"project": "/tmp"}, "project"),
        ({"runtime": "nope"}, "runtime"),
        ({"base_ref": "no-such-branch"}, "base_ref"),
        ({"workflow": "shuffled"}, "workflow"),
    ],
)
def test_bad_config_is_refused_with_the_field_named_and_leaves_nothing(
    batch_project, params, field
):
    repo, daemon = batch_project.repo, batch_project.daemon
    before = sorted(p.name for p in repo.parent.iterdir())
    good = {"workflow": "repeated", "project": str(repo), "runs": 2, "prompt": "answer: x"}
    with pytest.raises(DomainError) as info:
        with daemon.client() as client:
            client.call("batch_start", {**good, **params})
    assert info.value.field == field, info.value.to_data()
    assert sorted(p.name for p in repo.parent.iterdir()) == before
    assert git(repo, "branch", "--list").strip() == "* main"
    assert daemon.call("list_batches", {})["total"] == 0


def test_cancel_keeps_finished_results_and_stops_the_rest(batch_project):
    daemon = batch_project.daemon
    first = batch_project.finish(
        "repeated", states=("completed",), runs=3, concurrency=3, prompt="answer: quick"
    )
    slow = batch_project.start(
        "repeated", runs=3, concurrency=1, prompt="steps: 200\nstep_seconds: 0.05\nanswer: slow"
    )
    cancelled = daemon.call("batch_cancel", {"batch_id": slow["id"]})
    done = wait_batch(daemon, slow["id"], states=("cancelled",))
    assert {r["state"] for r in runs_of(done, "worker")} == {"cancelled"}
    assert daemon.call("batch", {"batch_id": first["id"]})["state"] == "completed"
    assert cancelled["id"] == slow["id"]


def test_followup_is_locked_in_ranked_until_reopened(batch_project):
    daemon = batch_project.daemon
    batch = batch_project.start_ranked_pair("score: 60")
    done = wait_batch(daemon, batch["id"])
    candidate = runs_of(done, "candidate")[0]
    with pytest.raises(DomainError) as info:
        with daemon.client() as client:
            client.call("run_followup", {"run_id": candidate["id"], "text": "answer: more"})
    assert info.value.code == "RunLocked" and info.value.field == "reopen"
    result = daemon.call(
        "run_followup", {"run_id": candidate["id"], "text": "answer: more", "reopen": True}
    )
    assert result["run"]["locked"] is False and result["run"]["attempts"][-1]["kind"] == "followup"
    wait_batch(daemon, batch["id"], states=("completed",))
    assert daemon.call("answer", {"agent_id": candidate["agent_id"]})["text"] == "more"


def test_resume_continues_a_failed_run_in_its_agents_session(batch_project):
    daemon = batch_project.daemon
    failed = batch_project.finish("repeated", states=("failed",), runs=1, prompt="fail: auth")
    run = runs_of(failed, "worker")[0]
    daemon.call("run_resume", {"run_id": run["id"], "prompt": "answer: recovered"})
    done = wait_batch(daemon, failed["id"], states=("completed",))
    resumed = runs_of(done, "worker")[0]
    assert [a["kind"] for a in resumed["attempts"]] == ["start", "resume"]
    assert daemon.call("answer", {"agent_id": resumed["agent_id"]})["text"] == "recovered"


def test_kill9_daemon_mid_ranked_batch_then_restart_completes_with_all_scores(batch_project):
    daemon = batch_project.daemon
    batch = batch_project.start(
        "ranked",
        runs=3,
        reviewers=2,
        concurrency=2,
        prompt=f"steps: 6\nstep_seconds: 0.1\n{CANDIDATE}",
        review_prompt="steps: 4\nstep_seconds: 0.1\nscore: auto",
    )
    wait_batch(daemon, batch["id"], states=("running",))
    daemon.kill9()
    daemon.start()
    done = wait_batch(daemon, batch["id"], timeout=180)
    assert done["state"] == "completed", done
    candidates = runs_of(done, "candidate")
    assert sorted(c["rank"] for c in candidates) == [1, 2, 3]
    assert all(c["score"] is not None for c in candidates)
    reviewers = runs_of(done, "reviewer")
    assert len(reviewers) == 6 and all(r["result"]["score"] is not None for r in reviewers)
    # No run started a second agent for the same attempt.
    for run in done["runs"]:
        assert len(run["attempts"]) == 1


def test_batch_show_follow_draws_progress_and_ends_with_the_ranking(batch_project):
    from tests.harness import cli

    batch = batch_project.start_ranked_pair("score: auto", runs=2)
    result = cli(batch_project.daemon.home, "batch", "show", batch["id"], "--follow", timeout=180)
    assert result.returncode == 0, result.stderr
    assert "ranking:" in result.stdout and "#1" in result.stdout and "#2" in result.stdout
    assert os.path.exists(batch_project.repo)


def test_batch_show_follow_without_a_terminal_prints_one_line_per_change(batch_project):
    """Piped (a log, CI), `--follow` never redraws the batch: its header once, then one line
    for each run's change, never the same line twice."""
    from tests.harness import cli

    batch = batch_project.start(
        "ranked",
        runs=2,
        reviewers=2,
        prompt="steps: 4\nstep_seconds: 0.2\n" + CANDIDATE,
        review_prompt="steps: 3\nstep_seconds: 0.2\nscore: auto",
    )
    result = cli(batch_project.daemon.home, "batch", "show", batch["id"], "--follow", timeout=180)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # its title (the prompt's first line), its id and state, its project, the marks: once
    assert lines[0] == "steps: 4" and lines[1].startswith(batch["id"])
    assert [line for line in lines if line.startswith("  project ")] == [lines[2]]
    assert lines[3].startswith("marks: ")
    assert len(lines) == len(set(lines)), result.stdout
    done = batch_project.daemon.call("batch", {"batch_id": batch["id"]})
    for run in done["runs"]:  # queued, running, succeeded, then scored and ranked at most
        said = [line for line in lines if run["id"] in line]
        assert 1 <= len(said) <= 5, (run["id"], said)
        assert " succeeded a1 " in said[-1], said
    assert "ranking:" in result.stdout and lines[-1].startswith("  #2")


def test_list_batches_filters_by_project_and_state_with_an_exact_total(batch_project):
    daemon = batch_project.daemon
    done = batch_project.finish("repeated", runs=1, prompt="answer: hi")
    blocked = batch_project.finish(
        "ranked", runs=1, reviewers=1, prompt="require: NOPE", review_prompt="score: 5"
    )
    assert (done["state"], blocked["state"]) == ("completed", "blocked")
    other = make_repo()
    elsewhere = batch_project.finish("repeated", project=str(other), runs=1, prompt="answer: hi")
    mine = daemon.call("list_batches", {"project": str(batch_project.repo)})
    assert [b["id"] for b in mine["items"]] == [blocked["id"], done["id"]] and mine["total"] == 2
    only = daemon.call("list_batches", {"project": str(other)})
    assert [b["id"] for b in only["items"]] == [elsewhere["id"]]
    stuck = daemon.call("list_batches", {"state": ["blocked"], "limit": 1})
    assert [b["id"] for b in stuck["items"]] == [blocked["id"]] and stuck["total"] == 1
    paged = daemon.call("list_batches", {"project": str(batch_project.repo), "offset": 1})
    assert [b["id"] for b in paged["items"]] == [done["id"]] and paged["total"] == 2
    with pytest.raises(DomainError) as bad:
        daemon.call("list_batches", {"state": ["stuck"]})
    assert bad.value.code == "InvalidParams" and (bad.value.field or "").startswith("state")
