"""`run_merge`: a run's branch merged back into a branch, in real git repositories, on the demo
engine. Every refusal and conflict is checked to leave every ref and worktree as it was."""

import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent_run.domain.errors import Conflict, DomainError
from agent_run.system import git_merge
from tests.batch_harness import git, runs_of, wait_batch
from tests.harness import cli, cli_json


def settled_runs(batch_project, n: int, prompt: str = "answer: ok", **params):
    done = batch_project.finish("repeated", runs=n, prompt=prompt, **params)
    assert done["state"] == "completed", done
    return done, runs_of(done, "worker")


def commit_in(path: Path, files: dict[str, str | bytes | None], message: str) -> str:
    """Write (or delete, for None) `files` in the worktree at `path` and commit them."""
    for name, content in files.items():
        target = path / name
        if content is None:
            git(path, "rm", "-q", name)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
        git(path, "add", name)
    git(path, "commit", "-q", "-m", message)
    return git(path, "rev-parse", "HEAD")


def merge(daemon, run_id: str, **params):
    return daemon.call("run_merge", {"run_id": run_id, **params})


def refused(daemon, run_id: str, **params) -> DomainError:
    with pytest.raises(DomainError) as info:
        with daemon.client() as client:
            client.call("run_merge", {"run_id": run_id, **params})
    return info.value


def snapshot(*paths: Path) -> list[str]:
    """Every ref, and each worktree's HEAD, index and working tree state (untracked included)."""
    state = [git(paths[0], "for-each-ref", "--format=%(refname) %(objectname)")]
    for path in paths:
        state += [
            git(path, "rev-parse", "HEAD"),
            git(path, "status", "--porcelain", "--untracked-files=all"),
            git(path, "ls-files", "--stage"),
            git(path, "diff"),
        ]
    return state


def parents(repo: Path, sha: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]


def test_clean_squash_after_a_dry_run_moves_the_checked_out_base_and_its_files(batch_project):
    """A ranked winner (its commit made by the demo agent through create_commit)."""
    repo, daemon = batch_project.repo, batch_project.daemon
    done = wait_batch(daemon, batch_project.start_ranked_pair()["id"])
    [run] = runs_of(done, "candidate")
    assert done["base_branch"] == "main"
    base = git(repo, "rev-parse", "main")
    dry = merge(daemon, run["id"], dry_run=True)
    assert dry["would_conflict"] is False and dry["conflicts"] == []
    assert (dry["ahead"], dry["behind"], dry["new_sha"]) == (1, 0, None)
    assert dry["merged_into"] == "main" and git(repo, "rev-parse", "main") == base
    assert not (repo / "feature.txt").exists()

    result = merge(daemon, run["id"])
    new = result["new_sha"]
    assert git(repo, "rev-parse", "main") == new and parents(repo, new) == [base]
    assert (repo / "feature.txt").read_text() == "a feature\n"
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""  # nothing staged
    assert git(repo, "log", "-1", "--format=%B", new).startswith(run["title"])
    shown = daemon.call("batch", {"batch_id": done["id"]})
    [after] = runs_of(shown, "candidate")
    assert (after["merged_sha"], after["merged_into"]) == (new, "main")
    text = cli_json(daemon.home, "batch", "show", done["id"])
    assert text["runs"][0]["merged_sha"] == new


def test_merge_strategy_makes_a_merge_commit_with_the_given_message(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    tip = commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    git(repo, "config", "user.name", "Repo Owner")
    git(repo, "config", "user.email", "owner@example.invalid")
    base = git(repo, "rev-parse", "main")
    result = merge(daemon, run["id"], strategy="merge", message="Merge the winner")
    assert (
        git(repo, "log", "-1", "--format=%an <%ae>", "main") == "Repo Owner <owner@example.invalid>"
    )
    assert parents(repo, result["new_sha"]) == [base, tip]
    assert git(repo, "log", "-1", "--format=%s", "main") == "Merge the winner"
    assert git(repo, "merge-base", "--is-ancestor", tip, "main") == ""
    assert (repo / "a.txt").read_text() == "a\n"


def test_a_second_winner_is_checked_against_the_moved_base(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, runs = settled_runs(batch_project, 3)
    commit_in(Path(runs[0]["worktree"]), {"README.md": "# first\n"}, "first")
    commit_in(Path(runs[1]["worktree"]), {"b.txt": "b\n"}, "second")
    commit_in(Path(runs[2]["worktree"]), {"README.md": "# third\n"}, "third")
    first = merge(daemon, runs[0]["id"])
    second = merge(daemon, runs[1]["id"])
    assert second["behind"] == 1 and parents(repo, second["new_sha"]) == [first["new_sha"]]
    assert (repo / "README.md").read_text() == "# first\n" and (repo / "b.txt").exists()
    before = snapshot(repo, Path(runs[2]["worktree"]))
    third = merge(daemon, runs[2]["id"])
    assert third["would_conflict"] is True and third["conflicts"] == ["README.md"]
    assert third["new_sha"] is None and snapshot(repo, Path(runs[2]["worktree"])) == before
    text = cli(daemon.home, "--format", "text", "run", "merge", runs[2]["id"], "--dry-run")
    assert "conflict README.md" in text.stdout and "--text 'Merge main into" in text.stdout


NOTES = "".join(f"line {n}\n" for n in range(1, 21))
CONFLICTS = {
    "text": (
        {"README.md": "# on main\n"},
        {"README.md": "# on the run\n"},
        {"README.md"},
    ),
    "binary": (
        {"data.bin": b"\x00\x01main\xff"},
        {"data.bin": b"\x00\x02run\xfe"},
        {"data.bin"},
    ),
    "rename_vs_modify": (  # the run renames notes.txt (git sees the rename) and edits line 2
        {"notes.txt": NOTES.replace("line 2\n", "changed on main\n")},
        {"notes.txt": None, "moved/notes.txt": NOTES.replace("line 2\n", "changed on the run\n")},
        {"moved/notes.txt"},
    ),
}


@pytest.mark.parametrize("kind", sorted(CONFLICTS))
def test_a_conflict_moves_no_ref_and_touches_no_worktree(batch_project, kind):
    repo, daemon = batch_project.repo, batch_project.daemon
    commit_in(repo, {"data.bin": b"\x00\x00base", "notes.txt": NOTES}, "seed")
    done, [run] = settled_runs(batch_project, 1)
    on_main, on_run, paths = CONFLICTS[kind]
    commit_in(repo, on_main, "main moves")
    commit_in(Path(run["worktree"]), on_run, "the run's change")
    before = snapshot(repo, Path(run["worktree"]))
    for dry_run in (True, False):
        result = merge(daemon, run["id"], dry_run=dry_run)
        assert result["would_conflict"] is True and paths <= set(result["conflicts"]), result
        assert result["new_sha"] is None
        assert result["followup_text"].startswith("Merge main into your branch")
        assert all(p in result["followup_text"] for p in paths)
        assert snapshot(repo, Path(run["worktree"])) == before
    [after] = runs_of(daemon.call("batch", {"batch_id": done["id"]}), "worker")
    assert after["merged_sha"] is None


def test_into_checked_out_with_tracked_changes_is_refused(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    (repo / "README.md").write_text("# edited, not committed\n")
    before = snapshot(repo)
    error = refused(daemon, run["id"])
    assert error.code == "Conflict" and error.field == "into"
    assert "uncommitted changes" in error.message
    assert snapshot(repo) == before


def test_an_untracked_file_on_the_base_is_never_overwritten(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"notes.txt": "from the run\n"}, "add notes")
    (repo / "notes.txt").write_text("my own notes\n")
    before = snapshot(repo)
    for dry_run in (True, False):
        error = refused(daemon, run["id"], dry_run=dry_run)
        assert error.field == "into" and "notes.txt" in error.message
        assert snapshot(repo) == before
    assert (repo / "notes.txt").read_text() == "my own notes\n"


IN_THE_WAY = {
    # an ignored file the run force-adds (`git add -f`): read-tree would treat it as disposable
    "ignored_file": ({".gitignore": ".env\n"}, {".env": "FROM_RUN=1\n"}, ".env", "file"),
    # an ignored file where the merge needs a folder (`cache/data.txt` needs `cache` a folder)
    "ignored_file_under_a_new_folder": (
        {".gitignore": "cache\n"},
        {"cache/data.txt": "from the run\n"},
        "cache",
        "file",
    ),
    # an ignored folder where the merge adds a file
    "ignored_folder": ({".gitignore": "build/\n"}, {"build": "a file now\n"}, "build", "folder"),
}


@pytest.mark.parametrize("case", sorted(IN_THE_WAY))
def test_an_ignored_file_on_the_base_is_never_overwritten(batch_project, case):
    """Ignored or not, a path the merge brings that exists on disk untracked refuses the merge
    (dry run too), naming it; the user's file, the branch and the run's worktree stay as they were."""
    repo, daemon = batch_project.repo, batch_project.daemon
    on_main, on_run, in_the_way, kind = IN_THE_WAY[case]
    commit_in(repo, on_main, "ignore local files")
    _done, [run] = settled_runs(batch_project, 1)
    worktree = Path(run["worktree"])
    for name, content in on_run.items():
        (worktree / name).parent.mkdir(parents=True, exist_ok=True)
        (worktree / name).write_text(content)
        git(worktree, "add", "-f", name)
    git(worktree, "commit", "-q", "-m", "the run's tracked copy")
    mine = repo / in_the_way
    if kind == "file":
        mine.write_text("MY_SECRET=keep-me\n")
    else:
        mine.mkdir()
        (mine / "artifact.o").write_text("my build output\n")
    assert git(repo, "status", "--porcelain") == ""  # ignored: the checkout counts as clean
    before = snapshot(repo, worktree)
    for dry_run in (True, False):
        error = refused(daemon, run["id"], dry_run=dry_run)
        assert error.code == "Conflict" and error.field == "into", error.to_data()
        assert in_the_way in error.message and "not tracked" in error.message
        assert error.details["paths"] == [in_the_way]
        assert snapshot(repo, worktree) == before
    if kind == "file":
        assert mine.read_text() == "MY_SECRET=keep-me\n"
    else:
        assert (mine / "artifact.o").read_text() == "my build output\n"
    [after] = runs_of(daemon.call("batch", {"batch_id": _done["id"]}), "worker")
    assert after["merged_sha"] is None
    mine_gone = repo.parent / "moved-away"
    mine.rename(mine_gone)  # once moved away, the same merge goes through
    result = merge(daemon, run["id"])
    assert git(repo, "rev-parse", "main") == result["new_sha"]
    assert snapshot(repo, worktree)[4:] == before[4:]  # the run's worktree: HEAD, index, files


def test_into_checked_out_clean_in_another_worktree_follows_and_others_stay(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n", "README.md": None}, "add a, drop readme")
    release = repo.parent / "release"
    git(repo, "worktree", "add", "-q", "-b", "release", str(release), "main")
    main_before = snapshot(repo)
    result = merge(daemon, run["id"], into="release")
    assert git(repo, "rev-parse", "release") == result["new_sha"]
    assert (release / "a.txt").read_text() == "a\n" and not (release / "README.md").exists()
    assert git(release, "status", "--porcelain", "--untracked-files=all") == ""
    assert snapshot(repo)[1:] == main_before[1:]  # the main worktree: HEAD, index, files


def test_a_batch_without_a_base_branch_needs_into_and_a_bad_into_is_named(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    sha = git(repo, "rev-parse", "HEAD")
    done, [run] = settled_runs(batch_project, 1, base_ref=sha)
    assert done["base_branch"] is None
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    assert refused(daemon, run["id"]).field == "into"
    for bad in ("no-such-branch", "bad..name"):
        assert refused(daemon, run["id"], into=bad).field == "into"
    assert merge(daemon, run["id"], into="main")["new_sha"] == git(repo, "rev-parse", "main")


def test_batch_clean_removes_a_squash_merged_branch_without_force(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    done, [run, other] = settled_runs(batch_project, 2)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    commit_in(Path(other["worktree"]), {"b.txt": "b\n"}, "add b")
    merge(daemon, run["id"])
    preview = daemon.call("batch_clean", {"batch_id": done["id"]})
    actions = {i["run_id"]: (i["action"], i["unmerged_commits"]) for i in preview["items"]}
    assert actions == {run["id"]: ("remove", 0), other["id"]: ("needs_force", 1)}
    daemon.call("batch_clean", {"batch_id": done["id"], "confirm": True})
    assert not Path(run["worktree"]).exists()
    assert git(repo, "branch", "--list", run["branch"]) == ""
    assert git(repo, "branch", "--list", other["branch"]).strip()


def test_the_base_moving_between_plan_and_swap_changes_nothing(batch_project):
    """The compare-and-swap itself: a commit lands on main after the merge was computed."""
    repo = batch_project.repo
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    plan = git_merge.plan_merge(repo, "main", run["branch"])
    new = git_merge.make_commit(repo, plan, "squash", "squash")
    moved = commit_in(repo, {"other.txt": "meanwhile\n"}, "meanwhile")
    before = snapshot(repo, Path(run["worktree"]))
    with pytest.raises(Conflict) as info:
        git_merge.apply_merge(repo, plan, new)
    assert info.value.field == "into" and "moved meanwhile" in info.value.message
    assert git(repo, "rev-parse", "main") == moved
    assert snapshot(repo, Path(run["worktree"])) == before


def test_cli_run_merge_dry_run_then_merge(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    dry = cli_json(daemon.home, "run", "merge", run["id"], "--dry-run")
    assert dry["dry_run"] is True and dry["ahead"] == 1
    done = cli_json(daemon.home, "run", "merge", run["id"], "--strategy", "merge")
    assert done["new_sha"] == git(repo, "rev-parse", "main")
    assert subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD"]).returncode == 0


def test_concurrent_merges_of_two_winners_both_land_one_after_the_other(batch_project):
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, runs = settled_runs(batch_project, 2)
    for n, run in enumerate(runs):
        commit_in(Path(run["worktree"]), {f"f{n}.txt": f"{n}\n"}, f"add f{n}")
    barrier = threading.Barrier(len(runs))

    def merge_after_barrier(run_id: str):
        with daemon.client() as client:
            barrier.wait()
            return client.call("run_merge", {"run_id": run_id})

    with ThreadPoolExecutor(len(runs)) as pool:
        results = list(pool.map(merge_after_barrier, [r["id"] for r in runs]))
    shas = {r["new_sha"] for r in results}
    assert git(repo, "rev-parse", "main") in shas and len(shas) == 2
    assert (repo / "f0.txt").exists() and (repo / "f1.txt").exists()
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_changes_already_on_the_base_make_no_commit_and_count_as_merged(batch_project):
    """Squash-merged by hand (or a merge whose record was lost): no empty commit; recorded."""
    repo, daemon = batch_project.repo, batch_project.daemon
    done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    git(repo, "merge", "-q", "--squash", run["branch"])
    git(repo, "commit", "-q", "-m", "squashed by hand")
    tip = git(repo, "rev-parse", "main")
    dry = merge(daemon, run["id"], dry_run=True)
    assert dry["ahead"] == 1 and dry["new_sha"] is None and dry["already_merged_at"] == tip
    result = merge(daemon, run["id"])
    assert result["new_sha"] is None and "already has these changes" in result["message"]
    assert git(repo, "rev-parse", "main") == tip
    [after] = runs_of(daemon.call("batch", {"batch_id": done["id"]}), "worker")
    assert after["merged_sha"] == tip
    cleaned = daemon.call("batch_clean", {"batch_id": done["id"], "confirm": True})
    assert [i["action"] for i in cleaned["items"]] == ["removed"]


OLD_GIT = "#!/bin/sh\necho 'git version 2.30.0'\n"  # an external program standing in for git


def test_a_git_older_than_2_38_is_named_by_run_merge_and_doctor(batch_project):
    """`merge-tree --write-tree` came in git 2.38. With an older git first on the daemon's PATH
    (a two-line script printing an old version: only the version check is exercised), run_merge
    refuses with a GitError saying what it needs, dry run too, and doctor says so."""
    import os

    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    before = snapshot(repo, Path(run["worktree"]))
    fake = repo.parent / "old-git"
    fake.mkdir()
    (fake / "git").write_text(OLD_GIT)
    (fake / "git").chmod(0o755)
    daemon.stop()
    daemon.env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    daemon.start()
    for dry_run in (True, False):
        error = refused(daemon, run["id"], dry_run=dry_run)
        assert error.code == "GitError", error.to_data()
        assert "needs git 2.38 or later" in error.message and "2.30.0" in error.message
        assert error.details == {"git_version": "2.30.0", "needs": "2.38"}
    report = daemon.call("doctor")
    [check] = [c for c in report["checks"] if c["check"] == "git"]
    assert check["level"] == "warn" and "2.30.0" in check["detail"], check
    assert "2.38" in check["detail"] and "run_merge" in check["detail"]
    daemon.stop()
    daemon.env = {}
    daemon.start()
    assert snapshot(repo, Path(run["worktree"])) == before
    [ok] = [c for c in daemon.call("doctor")["checks"] if c["check"] == "git"]
    assert ok["level"] == "ok", ok


def test_a_repository_without_an_identity_gets_agent_runs_not_an_auto_detected_one(
    batch_project,
):
    """No user.name / user.email in any git config the daemon reads, but $EMAIL set (git would
    auto-detect `user <$EMAIL>` from it): the merge commit is agent-run's, as documented."""
    import os

    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    no_config = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    unset = subprocess.run(
        ["git", "-C", str(repo), "config", "user.email"], env={**os.environ, **no_config}
    )
    assert unset.returncode != 0  # the repository itself has no identity
    daemon.stop()
    daemon.env = {**no_config, "EMAIL": "someone@auto-detected.invalid"}
    daemon.start()
    result = merge(daemon, run["id"])
    ident = "%an <%ae>|%cn <%ce>"
    assert git(repo, "log", "-1", f"--format={ident}", result["new_sha"]) == (
        "agent-run <agent-run@localhost>|agent-run <agent-run@localhost>"
    )


def test_invalid_utf8_in_git_output_is_shown_as_replacement_characters(batch_project):
    """A run's worktree whose file name, content and commit message are not UTF-8 (git passes
    the bytes through): batch_review, run_merge and batch_clean read git's output with U+FFFD
    in their place instead of failing on a decode."""
    repo, daemon = batch_project.repo, batch_project.daemon
    done, [run] = settled_runs(batch_project, 1)
    worktree = Path(run["worktree"])
    name = os.fsdecode(b"caf\xe9.txt")  # Latin-1, as an old tool would have named it
    (worktree / name).write_bytes(b"na\xefve\n")
    (worktree / "message").write_bytes(b"add caf\xe9\n")
    git(worktree, "add", name)
    git(worktree, "commit", "-q", "-F", "message")
    (worktree / "message").unlink()
    (worktree / os.fsdecode(b"new-\xff")).write_bytes(b"\xff\xfe untracked\n")
    (worktree / name).write_bytes(b"na\xefve, changed\n")  # a dirty tracked file too

    [review] = daemon.call("batch_review", {"batch_id": done["id"]})["runs"]
    [commit] = review["commits"]  # git re-encodes a message that is not UTF-8 as Latin-1
    assert commit.split(" ", 1)[1] == "add caf\u00e9"
    assert "+na\ufffdve, changed" in review["diff"]
    [untracked] = review["untracked"]
    assert untracked == {"path": "new-\ufffd", "preview": "\ufffd\ufffd untracked\n"}
    [item] = daemon.call("batch_clean", {"batch_id": done["id"]})["items"]
    assert (
        item["dirty_files"] == ['"caf\\351.txt"', '"new-\\377"'] and item["action"] == "needs_force"
    )

    (worktree / name).write_bytes(b"na\xefve\n")
    (worktree / os.fsdecode(b"new-\xff")).unlink()
    assert merge(daemon, run["id"], dry_run=True)["ahead"] == 1
    result = merge(daemon, run["id"])
    assert (repo / name).read_bytes() == b"na\xefve\n" and result["new_sha"]
    [item] = daemon.call("batch_clean", {"batch_id": done["id"], "confirm": True})["items"]
    assert item["action"] == "removed" and not worktree.exists()
