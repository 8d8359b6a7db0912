"""The sandbox's git boundary in real demo batches (real bubblewrap, real git): what a candidate's
model can do to its worktree's repository must not turn agent-run's own git calls, which run
outside the sandbox as the user (`create_commit`, `batch_review`), against the user.

Each probe prints ESCAPED-<what> only if the forbidden thing succeeded inside the sandbox. The
`demo_open` runtime (`sandbox = "none"`) lets the model do it for real, to show that agent-run's
own checks hold even then.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.batch_harness import make_repo, runs_of, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, make_home, remove_home, short_tmpdir

OPEN_RUNTIME = """[runtimes.demo_open]
engine = "demo"
models = ["demo-1"]
sandbox = "none"
"""
COMMIT = "write: feature.txt = a feature\ncommit: add the feature"


@pytest.fixture
def setting():
    home = make_home(TEST_CONFIG + OPEN_RUNTIME)
    daemon = DaemonProcess(home).start()
    repo, marks = make_repo(), short_tmpdir("arm-")
    yield daemon, repo, marks
    daemon.stop()
    remove_home(home)
    shutil.rmtree(repo.parent, ignore_errors=True)
    shutil.rmtree(marks, ignore_errors=True)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ranked(daemon: DaemonProcess, repo: Path, prompt: str, runtime: str = "demo") -> dict:
    """One candidate (with `prompt`) and one reviewer, run to the end; the candidate's run."""
    batch = daemon.call(
        "batch_start",
        {
            "runtime": runtime,
            "workflow": "ranked",
            "project": str(repo),
            "runs": 1,
            "reviewers": 1,
            "prompt": prompt,
            "review_prompt": "score: 50",
        },
    )
    done = wait_batch(daemon, batch["id"])
    return {"batch": done, "candidate": runs_of(done, "candidate")[0]}


def tool_output(daemon: DaemonProcess, agent_id: str) -> str:
    items = daemon.call("transcript", {"agent_id": agent_id})["items"]
    return "\n".join(i["content"] for i in items if i["role"] == "tool")


def escapes(text: str) -> set[str]:
    return {word for word in text.split() if word.startswith("ESCAPED-")}


def subjects(repo: Path, ref: str) -> list[str]:
    return git(repo, "log", "--format=%s", ref).splitlines()


REPOINT_HEAD = (
    "shell: echo 'ref: refs/heads/main' > \"$(git rev-parse --git-dir)/HEAD\" 2>/dev/null"
    " && echo ESCAPED-head"
)


def test_the_model_cannot_point_its_worktrees_head_at_another_branch(setting):
    daemon, repo, _ = setting
    run = ranked(daemon, repo, f"{REPOINT_HEAD}\n{COMMIT}")["candidate"]
    output = tool_output(daemon, run["agent_id"])
    assert escapes(output) == set(), output
    assert run["state"] == "succeeded", run
    assert subjects(repo, "main") == ["initial"]
    assert subjects(repo, run["branch"]) == ["add the feature", "initial"]


def test_create_commit_refuses_a_head_moved_to_another_branch_and_main_is_untouched(setting):
    """Unsandboxed, the model can repoint HEAD (nothing stops it): agent-run's create_commit,
    run outside, then refuses instead of committing on `main`."""
    daemon, repo, _ = setting
    run = ranked(daemon, repo, f"{REPOINT_HEAD}\n{COMMIT}", runtime="demo_open")["candidate"]
    output = tool_output(daemon, run["agent_id"])
    assert "ESCAPED-head" in output, output  # the move happened for real
    assert (
        "create_commit failed: refusing to commit: the worktree's HEAD is on refs/heads/main, "
        f"not on the run's branch refs/heads/{run['branch']}"
    ) in output, output
    assert subjects(repo, "main") == ["initial"]
    assert subjects(repo, run["branch"]) == ["initial"]
    assert run["state"] == "failed" and "no_commit" in (run["failure"] or ""), run


def worktree_config_repo(repo: Path) -> None:
    """The repository reads each worktree's own `config.worktree` (as `git sparse-checkout`
    leaves it)."""
    git(repo, "config", "core.repositoryFormatVersion", "1")
    git(repo, "config", "extensions.worktreeConfig", "true")


def planted_programs(marks: Path) -> str:
    """Shell lines that make hooks (each kind a commit or an index write runs) and an fsmonitor in
    the worktree, each touching a mark outside when it runs."""
    lines = ["mkdir -p h"]
    for name in ("pre-commit", "post-commit", "post-index-change", "fsmonitor"):
        lines.append(f"printf '#!/bin/sh\\ntouch {marks}/{name}\\n' > h/{name}")
    lines.append("chmod +x h/*")
    return " && ".join(lines)


def test_the_model_cannot_write_its_worktrees_own_git_config(setting):
    daemon, repo, marks = setting
    worktree_config_repo(repo)
    prompt = (
        f"shell: {planted_programs(marks)}\n"
        'shell: git config --worktree core.hooksPath "$PWD/h" 2>/dev/null'
        " && echo ESCAPED-worktree-config\n"
        f"{COMMIT}"
    )
    run = ranked(daemon, repo, prompt)["candidate"]
    output = tool_output(daemon, run["agent_id"])
    assert escapes(output) == set(), output
    assert run["state"] == "succeeded", run
    assert sorted(p.name for p in marks.iterdir()) == []


def test_agent_run_runs_no_program_a_worktree_config_names(setting):
    """Unsandboxed, the model writes `config.worktree` (hooks and an fsmonitor in its worktree):
    create_commit (add, commit) and batch_review (diff, log, untracked) outside run none."""
    daemon, repo, marks = setting
    worktree_config_repo(repo)
    prompt = (
        f"shell: {planted_programs(marks)}\n"
        'shell: git config --worktree core.hooksPath "$PWD/h" && '
        'git config --worktree core.fsmonitor "$PWD/h/fsmonitor" && echo CONFIGURED\n'
        f"{COMMIT}"
    )
    done = ranked(daemon, repo, prompt, runtime="demo_open")
    run = done["candidate"]
    assert "CONFIGURED" in tool_output(daemon, run["agent_id"])
    assert git(Path(run["worktree"]), "config", "--worktree", "core.hooksPath").strip()
    review = daemon.call("batch_review", {"batch_id": done["batch"]["id"]})
    assert any("feature.txt" in r["diff"] for r in review["runs"]), review
    assert run["state"] == "succeeded", run
    assert subjects(repo, run["branch"]) == ["add the feature", "initial"]
    assert sorted(p.name for p in marks.iterdir()) == []


def test_batch_review_shows_a_planted_link_as_a_link_never_what_it_points_at(setting):
    """The model links files outside its worktree into it (a secret file, a folder): the review,
    read outside the sandbox as the user, says where each link points and reads none."""
    daemon, repo, marks = setting
    secret = marks / "secret.txt"
    secret.write_text("HOST-SECRET-5b1e0c9d\n")
    prompt = (
        f"shell: ln -s {secret} leak.txt && ln -s {marks} leaked-folder && echo LINKED\n{COMMIT}"
    )
    done = ranked(daemon, repo, prompt)
    assert "LINKED" in tool_output(daemon, done["candidate"]["agent_id"])
    review = daemon.call("batch_review", {"batch_id": done["batch"]["id"]})
    untracked = {u["path"]: u["preview"] for r in review["runs"] for u in r["untracked"]}
    assert untracked["leak.txt"] == f"symlink \u2192 {secret}", untracked
    assert untracked["leaked-folder"] == f"symlink \u2192 {marks}", untracked
    assert "HOST-SECRET" not in str(review)


def test_a_batch_run_reads_no_other_runs_worktree(setting):
    """Two runs of one batch, each in its worktree beside the project: each model globs every
    worktree's README and reads only its own; unsandboxed, the same glob reads them all."""
    daemon, repo, _ = setting
    glob = (
        f'shell: for f in {repo.parent}/*/README.md; do cat "$f" >/dev/null 2>&1'
        ' && echo "READ $f"; done'
    )
    reads = {}
    for runtime in ("demo", "demo_open"):
        batch = daemon.call(
            "batch_start",
            {
                "runtime": runtime,
                "workflow": "repeated",
                "project": str(repo),
                "runs": 2,
                "prompt": f"{glob}\nanswer: looked",
            },
        )
        done = wait_batch(daemon, batch["id"])
        assert done["state"] == "completed", done
        for run in runs_of(done, "worker"):
            output = tool_output(daemon, run["agent_id"])
            read = {
                line.split(" ", 1)[1] for line in output.splitlines() if line.startswith("READ ")
            }
            reads[(runtime, run["worktree"])] = read
    worktrees = {tree for runtime, tree in reads if runtime == "demo"}
    open_trees = {tree for runtime, tree in reads if runtime == "demo_open"}
    for tree in worktrees:
        assert reads[("demo", tree)] == {f"{tree}/README.md"}, reads
    for tree in open_trees:  # every worktree there was, and the project's own checkout
        assert reads[("demo_open", tree)] >= {f"{t}/README.md" for t in worktrees | open_trees}
        assert f"{repo}/README.md" in reads[("demo_open", tree)]


def test_a_standalone_agent_given_create_commit_commits_only_on_its_workdirs_branch(setting):
    """An agent started with `worker_tools: [create_commit]` outside a batch (as the local daemon
    starts a run's agent on a host) commits on the branch its workdir was on at admission; a HEAD
    the model moved later (unsandboxed) is refused, and no other branch moves."""
    daemon, repo, _ = setting
    git(repo, "switch", "-q", "-c", "work")
    params = {"workdir": str(repo), "worker_tools": ["finish", "create_commit"]}
    agent = daemon.call("start", {"task": COMMIT, **params})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})["agent"]
    assert done["state"] == "succeeded", done
    assert subjects(repo, "work") == ["add the feature", "initial"]
    assert subjects(repo, "main") == ["initial"]
    moved = daemon.call(
        "start",
        {"task": f"{REPOINT_HEAD}\n{COMMIT}", "runtime": "demo_open", **params},
    )
    daemon.call("wait", {"agent_id": moved["id"], "timeout_seconds": 90})
    output = tool_output(daemon, moved["id"])
    assert "ESCAPED-head" in output, output  # the move happened for real
    assert "refusing to commit: the worktree's HEAD is on refs/heads/main" in output, output
    assert subjects(repo, "main") == ["initial"]
    assert subjects(repo, "work") == ["add the feature", "initial"]
    plain = daemon.call("start", {"task": COMMIT, "workdir": str(repo)})  # no create_commit asked
    daemon.call("wait", {"agent_id": plain["id"], "timeout_seconds": 90})
    assert "no worker tool 'create_commit'" in tool_output(daemon, plain["id"])
    assert subjects(repo, "work") == ["add the feature", "initial"]
