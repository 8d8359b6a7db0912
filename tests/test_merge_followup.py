"""After a conflicting `run_merge`: the follow-up it suggests works where the run's agent works
(its sandbox keeps the worktree's HEAD read-only, so a rebase cannot), the CLI says so with a
non-zero exit and a follow-up command that runs as printed, and a run whose worktree is gone
still merges from its branch. Real daemons, real git, the demo engine's shell in its sandbox."""

import re
import shlex
from pathlib import Path

from tests.batch_harness import git, runs_of, wait_batch
from tests.harness import cli
from tests.test_run_merge import commit_in, merge, parents, settled_runs


def _follow_up(daemon, batch_id: str, run: dict, text: str) -> dict:
    """Send the follow-up and wait until the run's new attempt settled; the run then."""
    daemon.call("run_followup", {"run_id": run["id"], "text": text})
    done = wait_batch(daemon, batch_id)
    [after] = [r for r in done["runs"] if r["id"] == run["id"]]
    assert after["attempt"] == run["attempt"] + 1 and after["state"] == "succeeded", after
    return after


def _conflicting_pair(batch_project) -> tuple[str, dict, dict, str]:
    """Two settled runs that each changed README.md, and main changed it too: (batch id, run,
    other run, main's tip)."""
    done, [run, other] = settled_runs(batch_project, 2)
    for each in (run, other):
        commit_in(Path(each["worktree"]), {"README.md": "# on the run\n"}, "the run's readme")
    main_tip = commit_in(batch_project.repo, {"README.md": "# on main\n"}, "main's readme")
    return done["id"], run, other, main_tip


def test_the_suggested_follow_up_merges_in_the_sandbox_and_the_merge_then_lands(batch_project):
    """The demo agent's shell runs, in its sandbox, the command the follow-up names, resolves
    and commits with plain git: its branch gets a merge commit (agent-run's identity, the
    repository naming none), and the run then merges cleanly. The old ask, `git rebase`, fails
    in the same sandbox: the control that the sandbox is there."""
    repo, daemon = batch_project.repo, batch_project.daemon
    batch_id, run, control, main_tip = _conflicting_pair(batch_project)
    run_tip = git(repo, "rev-parse", run["branch"])
    conflict = merge(daemon, run["id"])
    assert conflict["would_conflict"] is True and conflict["conflicts"] == ["README.md"]
    assert conflict["followup_reopen"] is False  # a repeated batch's run is not locked
    [command] = re.findall(r"`(git merge [^`]+)`", conflict["followup_text"])
    assert command == "git merge main"

    rebase = "shell: git rebase main > rebase.out 2>&1; echo $? > rebase.status"
    _follow_up(daemon, batch_id, control, rebase)
    control_tree = Path(control["worktree"])
    assert (control_tree / "rebase.status").read_text().strip() != "0"
    assert "HEAD" in (control_tree / "rebase.out").read_text()  # it cannot move HEAD

    resolve = (
        f"shell: {command}\n"
        "shell: printf '# resolved\\n' > README.md && git add README.md && git commit --no-edit\n"
        "answer: merged main"
    )
    _follow_up(daemon, batch_id, run, resolve)
    tip = git(repo, "rev-parse", run["branch"])
    assert parents(repo, tip) == [run_tip, main_tip], git(repo, "log", "--graph", run["branch"])
    assert git(repo, "log", "-1", "--format=%an <%ae>", tip) == "agent-run <agent-run@localhost>"
    merged = merge(daemon, run["id"])
    assert merged["would_conflict"] is False and merged["new_sha"] == git(repo, "rev-parse", "main")
    assert (repo / "README.md").read_text() == "# resolved\n"


def test_a_conflicting_run_merge_exits_2_and_prints_a_follow_up_that_runs(batch_project):
    """A ranked candidate is locked: the printed follow-up carries --reopen and runs as printed;
    a dry run exits 2 too, and `--help` lists the status."""
    repo, daemon = batch_project.repo, batch_project.daemon
    done = wait_batch(daemon, batch_project.start_ranked_pair()["id"])
    assert done["state"] == "completed", done
    [candidate] = runs_of(done, "candidate")
    commit_in(repo, {"feature.txt": "main's feature\n"}, "main adds the feature too")

    dry = cli(daemon.home, "run", "merge", candidate["id"], "--dry-run")
    assert dry.returncode == 2, dry
    assert '"would_conflict": true' in dry.stdout and '"followup_reopen": true' in dry.stdout
    shown = cli(daemon.home, "--format", "text", "run", "merge", candidate["id"])
    assert shown.returncode == 2, shown
    [printed] = [line for line in shown.stdout.splitlines() if "follow up with:" in line]
    argv = shlex.split(printed.split("follow up with:", 1)[1])
    assert argv[:5] == ["agent-run", "run", "followup", candidate["id"], "--reopen"], argv
    assert argv[5:7] == ["--text", merge(daemon, candidate["id"])["followup_text"]]
    followed = cli(daemon.home, *argv[1:])
    assert followed.returncode == 0, followed
    wait_batch(daemon, done["id"])

    helptext = cli(daemon.home, "run", "merge", "--help").stdout
    assert re.search(r"^\s+2\s+the merge would conflict", helptext, re.M), helptext


def test_a_run_whose_worktree_was_removed_merges_from_its_branch(batch_project):
    """The user removed the worktree; the branch is all a merge needs. A rerun, which needs the
    worktree, says the worktree is gone without blaming `batch clean`."""
    repo, daemon = batch_project.repo, batch_project.daemon
    _done, [run] = settled_runs(batch_project, 1)
    commit_in(Path(run["worktree"]), {"a.txt": "a\n"}, "add a")
    git(repo, "worktree", "remove", run["worktree"])
    merged = merge(daemon, run["id"])
    assert merged["new_sha"] == git(repo, "rev-parse", "main")
    assert (repo / "a.txt").read_text() == "a\n"
    refused = cli(daemon.home, "run", "rerun", run["id"])
    assert refused.returncode == 1 and "no longer exists" in refused.stdout, refused
    assert "batch clean" not in refused.stdout
