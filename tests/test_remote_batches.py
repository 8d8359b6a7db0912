"""A ranked batch with its candidates on a host and its reviewers here, over a real sshd: the
pinned base reaches the host by `git bundle`, the candidates' worktrees are made there, their
commits come back by `git bundle`, and review and `run_merge` work on them here."""

import shutil
from collections.abc import Iterator

import pytest

from tests.batch_harness import CANDIDATE, BatchProject, git, make_repo, runs_of, wait_batch
from tests.harness import DaemonProcess, db_rows, make_home, remove_home
from tests.ssh_harness import RemoteHost, local_config, reachable, remote_host  # noqa: F401

pytestmark = [pytest.mark.sshd, pytest.mark.xdist_group("sshd")]


@pytest.fixture
def project(reachable: RemoteHost) -> Iterator[BatchProject]:  # noqa: F811
    home = make_home(local_config(reachable))
    daemon = DaemonProcess(home).start()
    project = BatchProject(
        daemon, make_repo({"README.md": "# project\n", "lib/core.txt": "core\n"})
    )
    yield project
    daemon.stop()
    remove_home(home)
    shutil.rmtree(project.repo.parent, ignore_errors=True)


def test_a_ranked_batch_runs_its_candidates_on_the_host_and_merges_a_winner_here(
    project: BatchProject,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    daemon, repo = project.daemon, project.repo
    base = git(repo, "rev-parse", "main")
    started = project.start(
        "ranked", runs=2, reviewers=1, prompt=CANDIDATE, review_prompt="score: auto", host="box"
    )
    done = wait_batch(daemon, started["id"], timeout=150)
    assert done["state"] == "completed", done
    candidates, reviewers = runs_of(done, "candidate"), runs_of(done, "reviewer")
    placed = {
        r["id"]: r["host"]
        for r in db_rows(
            daemon.home, "SELECT a.id, e.host FROM agents a JOIN executions e ON e.agent_id = a.id"
        )
    }
    assert {placed[r["agent_id"]] for r in candidates} == {"box"}
    assert {placed[r["agent_id"]] for r in reviewers} == {None}  # reviewers ran here
    # The host had its own worktrees at the pinned base, on the runs' branches.
    folder = reachable.user_home / "agent-run-work" / done["id"]
    for run in candidates:
        on_host = folder / run["worktree"].rsplit("/", 1)[1]
        assert (on_host / "feature.txt").read_text() == "a feature\n"
    # Their commits came back: review shows them against the pinned base.
    review = daemon.call("batch_review", {"batch_id": done["id"]})
    for run in (r for r in review["runs"] if r["stage"] == "candidate"):
        assert len(run["commits"]) == 1 and run["commits"][0].endswith("add the feature")
        assert "+a feature" in run["diff"]
    [winner] = [r for r in candidates if r["rank"] == 1]
    merged = daemon.call("run_merge", {"run_id": winner["id"]})
    assert git(repo, "rev-parse", "main") == merged["new_sha"]
    assert git(repo, "rev-list", "--parents", "-n", "1", merged["new_sha"]).split()[1:] == [base]
    assert (repo / "feature.txt").read_text() == "a feature\n"
    # Cleaning the batch removes the runs' copies on the host too (the folder once empty).
    cleaned = daemon.call("batch_clean", {"batch_id": done["id"], "confirm": True, "force": True})
    assert "removed on host box too" in cleaned["message"], cleaned
    assert not folder.exists()
