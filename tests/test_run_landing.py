"""Landing the winner (issue 37, item 6): the merge's dry run shows exactly the diff that lands
and the commit message it would use (the batch's title and the agent's own commit subjects);
uncommitted work is named, never "nothing to merge"; `run_push` pushes a run's branch (or what
it was merged into) to a configured remote, never forced, never showing credentials; and a
pull request through `gh` (the command it runs, checked here by a stand-in `gh` on PATH) or
the compare page where gh cannot."""

import json
import os
import stat
from pathlib import Path

import pytest

from agent_run.domain.errors import DomainError
from tests.batch_harness import BatchProject, git, make_repo, runs_of, wait_batch
from tests.harness import DaemonProcess, cli, short_tmpdir


def _refused(daemon, tool: str, params: dict) -> DomainError:
    with pytest.raises(DomainError) as info:
        daemon.call(tool, params)
    return info.value


def test_the_dry_run_shows_the_exact_diff_and_message_that_land(batch_project: BatchProject):
    repo, daemon = batch_project.repo, batch_project.daemon
    batch = batch_project.start_ranked_pair(title="Add the feature")
    [run] = runs_of(wait_batch(daemon, batch["id"]), "candidate")
    assert run["can_merge"] is True
    base = git(repo, "rev-parse", "main")
    dry = daemon.call("run_merge", {"run_id": run["id"], "dry_run": True})
    assert dry["diff"].startswith("diff --git a/feature.txt b/feature.txt\nnew file mode")
    assert dry["diff"].endswith("+a feature\n") and dry["diff_truncated"] is False
    assert dry["commit_subjects"] == ["add the feature"]
    assert dry["commit_message"] == (
        "Add the feature\n\n- add the feature\n\nMerged from run "
        f"{run['id']} (candidate 1, branch {run['branch']}, 1 commit(s), squash) by agent-run."
    )
    assert dry["uncommitted"] == [] and git(repo, "rev-parse", "main") == base
    edited = daemon.call(
        "run_merge", {"run_id": run["id"], "dry_run": True, "message": "My own words"}
    )
    assert edited["commit_message"] == "My own words"
    merged = daemon.call("run_merge", {"run_id": run["id"]})
    new = merged["new_sha"]
    assert git(repo, "log", "-1", "--format=%B", new).strip() == dry["commit_message"]
    assert git(repo, "diff", base, new) + "\n" == dry["diff"]  # what the dry run showed landed
    after = daemon.call("batch", {"batch_id": batch["id"]})
    assert runs_of(after, "candidate")[0]["can_merge"] is False  # landed: nothing left to merge


def test_uncommitted_work_is_named_never_nothing_to_merge(batch_project: BatchProject):
    repo, daemon = batch_project.repo, batch_project.daemon
    done = batch_project.finish(
        "repeated", runs=1, prompt="write: a.txt = a\nwrite: b.txt = b\nwrite: c.txt = c"
    )
    [run] = runs_of(done, "worker")
    assert run["can_merge"] is False and run["diff"]["uncommitted_files"] == 3
    nothing = daemon.call("run_merge", {"run_id": run["id"]})
    assert nothing["message"] == (
        "3 uncommitted file(s) (a.txt, b.txt, c.txt) and nothing committed: ask the run to "
        "commit them, then merge"
    )
    assert nothing["uncommitted"] == ["a.txt", "b.txt", "c.txt"] and nothing["new_sha"] is None
    assert "a.txt, b.txt, c.txt" in nothing["followup_text"]
    worktree = Path(run["worktree"])
    git(worktree, "add", "a.txt")
    git(worktree, "commit", "-q", "-m", "add a")
    dry = daemon.call("run_merge", {"run_id": run["id"], "dry_run": True})
    assert dry["message"] == (
        "would merge cleanly into main; 2 uncommitted file(s) (b.txt, c.txt) left out: ask the "
        "run to commit them, or merge the committed part"
    )
    merged = daemon.call("run_merge", {"run_id": run["id"]})
    assert merged["message"].startswith("merged the committed part into main as ")
    assert merged["message"].endswith("; 2 uncommitted file(s) (b.txt, c.txt) left out")
    assert (repo / "a.txt").exists() and not (repo / "b.txt").exists()
    text = cli(daemon.home, "--format", "text", "run", "merge", run["id"], "--dry-run")
    assert "2 uncommitted file(s)" in text.stdout + text.stderr


def _bare(tmp: Path, name: str = "remote.git") -> Path:
    bare = tmp / name
    git(tmp, "init", "-q", "--bare", str(bare))
    return bare


def _remote_tip(bare: Path, branch: str) -> str:
    return git(bare, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")


def test_a_run_is_pushed_to_a_bare_remote_never_forced(batch_project: BatchProject):
    repo, daemon = batch_project.repo, batch_project.daemon
    bare = _bare(repo.parent)
    git(repo, "remote", "add", "origin", str(bare))
    [run] = runs_of(wait_batch(daemon, batch_project.start_ranked_pair()["id"]), "candidate")
    unknown = _refused(daemon, "run_push", {"run_id": run["id"], "remote": "upstream"})
    assert (unknown.code, unknown.field) == ("InvalidRequest", "remote")
    assert "(remotes: origin)" in unknown.message

    pushed = daemon.call("run_push", {"run_id": run["id"], "remote": "origin"})
    tip = git(repo, "rev-parse", run["branch"])
    assert (pushed["sha"], pushed["remote_ref"]) == (tip, f"refs/heads/{run['branch']}")
    assert _remote_tip(bare, run["branch"]) == tip
    renamed = daemon.call("run_push", {"run_id": run["id"], "remote": "origin", "branch": "winner"})
    assert renamed["remote_ref"] == "refs/heads/winner" and _remote_tip(bare, "winner") == tip

    # Someone else moved the remote branch: the push is refused, nothing forced.
    other = short_tmpdir("arp-") / "clone"
    git(repo.parent, "clone", "-q", str(bare), str(other))
    git(other, "checkout", "-q", "winner")
    (other / "theirs.txt").write_text("theirs\n")
    git(other, "add", "theirs.txt")
    git(other, "commit", "-q", "-m", "theirs")
    git(other, "push", "-q", "origin", "winner")
    theirs = _remote_tip(bare, "winner")
    refusal = _refused(
        daemon, "run_push", {"run_id": run["id"], "remote": "origin", "branch": "winner"}
    )
    assert refusal.code == "GitError" and "rejected" in refusal.message
    assert _remote_tip(bare, "winner") == theirs

    # The merged result: only once run_merge merged it, then the target branch as it is.
    not_yet = _refused(
        daemon, "run_push", {"run_id": run["id"], "remote": "origin", "merged": True}
    )
    assert not_yet.field == "merged"
    daemon.call("run_merge", {"run_id": run["id"]})
    main = daemon.call("run_push", {"run_id": run["id"], "remote": "origin", "merged": True})
    assert main["remote_ref"] == "refs/heads/main"
    assert _remote_tip(bare, "main") == git(repo, "rev-parse", "main")


def test_credentials_in_a_remote_url_are_never_shown(batch_project: BatchProject):
    repo, daemon = batch_project.repo, batch_project.daemon
    git(repo, "remote", "add", "origin", "https://someone:s3cr3t-token@127.0.0.1:9/x.git")
    [run] = runs_of(wait_batch(daemon, batch_project.start_ranked_pair()["id"]), "candidate")
    refusal = _refused(daemon, "run_push", {"run_id": run["id"], "remote": "origin"})
    assert refusal.code == "GitError" and "127.0.0.1" in refusal.message
    assert "s3cr3t" not in refusal.message and "s3cr3t" not in json.dumps(refusal.details)


def test_a_run_whose_worktree_was_removed_is_pushed_from_its_branch(
    batch_project: BatchProject,
):
    """A push reads only the run's branch: a worktree the user removed by hand is no obstacle."""
    repo, daemon = batch_project.repo, batch_project.daemon
    bare = _bare(repo.parent)
    git(repo, "remote", "add", "origin", str(bare))
    [run] = runs_of(wait_batch(daemon, batch_project.start_ranked_pair()["id"]), "candidate")
    git(repo, "worktree", "remove", "--force", run["worktree"])
    pushed = daemon.call("run_push", {"run_id": run["id"], "remote": "origin"})
    assert (
        _remote_tip(bare, run["branch"]) == pushed["sha"] == git(repo, "rev-parse", run["branch"])
    )


def test_a_run_with_nothing_committed_is_not_pushed(batch_project: BatchProject):
    repo, daemon = batch_project.repo, batch_project.daemon
    git(repo, "remote", "add", "origin", str(_bare(repo.parent)))
    [run] = runs_of(batch_project.finish("repeated", runs=1, prompt="write: a.txt = a"), "worker")
    refusal = _refused(daemon, "run_push", {"run_id": run["id"], "remote": "origin"})
    assert refusal.field == "run_id" and "uncommitted work is never pushed" in refusal.message


@pytest.fixture
def gh_daemon(home):
    """A daemon whose PATH starts with a stand-in `gh` that records its argv and prints a URL."""
    bin_dir = short_tmpdir("argh-")
    record = bin_dir / "argv.json"
    gh = bin_dir / "gh"
    gh.write_text(
        "#!/bin/sh\n"
        f'python3 -c \'import json, sys; json.dump(sys.argv[1:], open("{record}", "w"))\' "$@"\n'
        "echo https://github.com/owner/repo/pull/7\n"
    )
    gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
    daemon = DaemonProcess(home, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}).start()
    yield daemon, record
    daemon.stop()


def test_a_pull_request_is_opened_with_gh_on_a_github_remote(gh_daemon):
    daemon, record = gh_daemon
    project = BatchProject(daemon, make_repo())
    repo = project.repo
    bare = _bare(repo.parent)
    git(repo, "remote", "add", "origin", "https://github.com/owner/repo.git")
    git(repo, "remote", "set-url", "--push", "origin", str(bare))  # pushes stay on this machine
    batch = project.start_ranked_pair(title="Add the feature")
    [run] = runs_of(wait_batch(daemon, batch["id"]), "candidate")
    pushed = daemon.call(
        "run_push", {"run_id": run["id"], "remote": "origin", "pull_request": True}
    )
    assert _remote_tip(bare, run["branch"]) == pushed["sha"]
    pr = pushed["pull_request"]
    assert (pr["created"], pr["url"]) == (True, "https://github.com/owner/repo/pull/7")
    body = f"From run {run['id']} (candidate 1) of agent-run batch {batch['id']}."
    expected = [
        "pr",
        "create",
        "--repo",
        "owner/repo",
        "--head",
        run["branch"],
        "--base",
        "main",
        "--title",
        "Add the feature",
        "--body",
        body,
    ]
    assert pr["command"] == ["gh", *expected]
    assert json.loads(record.read_text()) == expected  # what gh was really given


def test_without_gh_or_off_github_the_compare_page_or_why_not(batch_project: BatchProject):
    repo, daemon = batch_project.repo, batch_project.daemon
    bare = _bare(repo.parent)
    for name, url in (
        ("lab", "git@gitlab.com:group/proj.git"),
        ("hub", "https://github.com/owner/repo.git"),
        ("mine", "https://git.example.invalid/proj.git"),
    ):
        git(repo, "remote", "add", name, url)
        git(repo, "remote", "set-url", "--push", name, str(bare))
    [run] = runs_of(wait_batch(daemon, batch_project.start_ranked_pair()["id"]), "candidate")

    def pr(remote: str) -> dict:
        params = {"run_id": run["id"], "remote": remote, "pull_request": True}
        return daemon.call("run_push", params)["pull_request"]

    lab = pr("lab")
    assert lab["created"] is False and lab["url"] == (
        "https://gitlab.com/group/proj/-/merge_requests/new?merge_request%5Bsource_branch%5D="
        f"{run['branch']}&merge_request%5Btarget_branch%5D=main"
    )
    hub = pr("hub")
    if hub["command"] is None:  # no gh on this machine's PATH: the compare page instead
        assert (
            hub["url"] == f"https://github.com/owner/repo/compare/main...{run['branch']}?expand=1"
        )
        assert hub["message"].startswith("gh is not installed: open https://github.com/")
    mine = pr("mine")
    assert (mine["created"], mine["url"]) == (False, None)
    assert "is not on GitHub or GitLab" in mine["message"]


def test_run_push_on_the_command_line(batch_project: BatchProject):
    repo, daemon = batch_project.repo, batch_project.daemon
    bare = _bare(repo.parent)
    git(repo, "remote", "add", "origin", str(bare))
    [run] = runs_of(wait_batch(daemon, batch_project.start_ranked_pair()["id"]), "candidate")
    done = cli(daemon.home, "--format", "text", "run", "push", run["id"], "--remote", "origin")
    assert done.returncode == 0, done.stderr
    assert f"pushed {run['branch']}" in done.stdout and "to origin" in done.stdout
    assert _remote_tip(bare, run["branch"])
