"""A git worktree inside the sandbox (real bubblewrap, real git): a `write` agent commits on its
own branch, and nothing else of the repository is writable or, of other worktrees, visible.

Each probe prints ESCAPED-<what> only if the forbidden thing succeeded.
"""

import json
import subprocess
from pathlib import Path

import pytest

from agent_run.engines.plan import load_plan
from agent_run.engines.sandbox import sandbox_argv
from agent_run.engines.sandbox_git import Bind, git_binds

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


@pytest.fixture
def repo(tmp_path):
    """A repository with two agents' worktrees on `agent-run/b1/work-0` and `-1`."""
    root = tmp_path / "repo"
    subprocess.run([*GIT, "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-q", "--allow-empty", "-m", "i"], check=True)
    trees = {}
    for n in (0, 1):
        tree = tmp_path / f"tree{n}"
        branch = f"agent-run/b1/work-{n}"
        subprocess.run([*GIT, "-C", str(root), "worktree", "add", "-q", "-b", branch, str(tree)])
        (tree / "secret.txt").write_text(f"agent {n}'s work\n")
        trees[n] = tree
    box = tmp_path / "box"
    box.mkdir()
    return root, trees, box


def plan(workdir: Path, box: Path, profile: str):
    fields = {
        "agent_id": "ag_1",
        "execution_id": "ex_1",
        "runtime": "demo",
        "engine": "demo",
        "model": "demo-1",
        "workdir": str(workdir),
        "profile": profile,
        "runtime_config": {"engine": "demo"},
        "stall_seconds": 60.0,
        "cancel_grace_seconds": 1.0,
        "engine_home": str(box),
        "read_roots": [],
    }
    return load_plan(json.dumps(fields))


def inside(workdir: Path, box: Path, script: str, profile: str = "write"):
    home = box.parent / "home"  # agent-run's home: not under anything the sandbox mounts
    argv = sandbox_argv(plan(workdir, box, profile), ["/bin/sh", "-c", script], {}, box, home)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_a_write_agent_commits_on_its_branch_and_touches_nothing_else(repo):
    root, trees, box = repo
    git_dir, other = root / ".git", trees[1]
    probes = [
        f"{' '.join(GIT)} add secret.txt && {' '.join(GIT)} commit -q -m mine && echo COMMITTED",
        "git update-ref refs/heads/main HEAD 2>/dev/null && echo ESCAPED-main-ref",
        f"echo '[core]' >> {git_dir}/config 2>/dev/null && echo ESCAPED-config",
        "git config core.fsmonitor /bin/true 2>/dev/null && echo ESCAPED-git-config",
        f"touch {git_dir}/hooks/post-checkout 2>/dev/null && echo ESCAPED-hooks",
        f"cat {other}/secret.txt 2>/dev/null && echo ESCAPED-other-tree",
        f"ls {git_dir}/worktrees/tree1 >/dev/null 2>&1 && echo ESCAPED-other-admin",
        "echo 'gitdir: /tmp/fake' > .git 2>/dev/null && echo ESCAPED-dot-git",
        f"echo /tmp/fake > {git_dir}/worktrees/tree0/commondir 2>/dev/null"
        " && echo ESCAPED-commondir",
    ]
    done = inside(trees[0], box, "; ".join(probes))
    assert "COMMITTED" in done.stdout, done
    assert "ESCAPED" not in done.stdout, done.stdout
    log = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s", "agent-run/b1/work-0"],
        capture_output=True,
        text=True,
    )
    assert log.stdout.split() == ["mine", "i"]  # the commit landed in the real repository
    main = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s", "main"], text=True, capture_output=True
    )
    assert main.stdout.split() == ["i"]
    assert (trees[0] / ".git").read_text().startswith(f"gitdir: {git_dir}/worktrees/tree0")


def test_a_read_only_agent_reads_its_history_and_writes_nothing(repo):
    root, trees, box = repo
    script = "git log --format=%s; git commit -q --allow-empty -m x 2>/dev/null && echo ESCAPED"
    done = inside(trees[0], box, script, profile="read_only")
    assert done.stdout.split() == ["i"], done


def test_the_binds_hide_other_worktrees_and_open_only_what_a_commit_writes(repo):
    root, trees, _ = repo
    git_dir = (root / ".git").resolve()
    binds = {b.target: b for b in git_binds(str(trees[0]), writable=True)}
    writable = {t for t, b in binds.items() if b.writable}
    assert writable == {
        str(git_dir / "objects"),
        str(git_dir / "refs/heads/agent-run/b1"),
        str(git_dir / "logs/refs/heads/agent-run/b1"),
        str(git_dir / "worktrees/tree0"),
    }
    assert binds[str(git_dir / "worktrees")] == Bind("", str(git_dir / "worktrees"), tmpfs=True)
    assert not binds[str(git_dir)].writable
    assert not any(b.writable for b in git_binds(str(trees[0]), writable=False))


def test_after_pack_refs_a_write_agent_still_writes_only_its_batchs_ref_folder(repo, daemon):
    """`git pack-refs` removes the loose refs and their folders; the branch's ref folder is made
    again before the sandbox opens it, never its parent (`refs/heads/`, every branch). What stays
    writable is exactly the folder of the branch's ref: this batch's refs (a sibling run's
    `agent-run/b1/work-1` too, the limit SECURITY.md states), through a real demo agent."""
    root, trees, _ = repo
    subprocess.run(["git", "-C", str(root), "pack-refs", "--all"], check=True)
    assert not (root / ".git" / "refs" / "heads" / "agent-run").exists()
    git = " ".join(GIT)
    # A ref is a file: written as one (no reflog to append to, unlike `git update-ref`).
    heads = '"$(git rev-parse --git-common-dir)/refs/heads"'
    probes = [
        f"{git} add secret.txt && {git} commit -q -m mine && echo COMMITTED",
        f"git rev-parse HEAD > {heads}/main 2>/dev/null && echo ESCAPED-main",
        f"git rev-parse HEAD > {heads}/top 2>/dev/null && echo ESCAPED-top-level",
        f"mkdir -p {heads}/agent-run/b2 2>/dev/null && git rev-parse HEAD > {heads}/agent-run/b2/x"
        " && echo ESCAPED-other-batch",
        f"git rev-parse HEAD > {heads}/agent-run/b1/work-1 && echo SIBLING-WRITABLE",
        'echo x >> "$(git rev-parse --git-common-dir)/logs/HEAD" 2>/dev/null'
        " && echo ESCAPED-main-reflog",
    ]
    task = "\n".join(f"shell: {p}" for p in probes) + "\nanswer: probed"
    agent = daemon.call("start", {"task": task, "workdir": str(trees[0])})
    view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})["agent"]
    assert view["state"] == "succeeded", view
    items = daemon.call("transcript", {"agent_id": agent["id"]})["items"]
    output = "\n".join(i["content"] for i in items if i["role"] == "tool")
    assert "COMMITTED" in output and "SIBLING-WRITABLE" in output, output
    assert "ESCAPED" not in output, output
    refs = subprocess.run(
        ["git", "-C", str(root), "for-each-ref", "--format=%(refname)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert "refs/heads/top" not in refs and "refs/heads/agent-run/b2/x" not in refs
    main = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s", "main"], text=True, capture_output=True
    )
    assert main.stdout.split() == ["i"]
