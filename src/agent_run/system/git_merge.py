"""Merging a branch into another without touching a worktree: `git merge-tree --write-tree`,
`commit-tree`, then `update-ref` as a compare-and-swap. A branch checked out somewhere is updated
only when that worktree is clean and its files can follow (`read-tree -m -u`)."""

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_run.domain.errors import Conflict, GitError, InvalidRequest
from agent_run.system.git import GIT_TIMEOUT_SECONDS, NO_PROGRAMS, git

Strategy = Literal["squash", "merge"]
# `git merge-tree --write-tree` (and its --name-only, --no-messages) came in git 2.38.
MERGE_TREE_GIT = (2, 38)


@dataclass(frozen=True)
class MergePlan:
    into: str  # the target branch's short name
    old: str  # its tip when planned: update-ref swaps only from this
    head: str  # the tip of the branch being merged
    tree: str | None  # the merged tree; None when `into` already has every change
    conflicts: list[str]
    ahead: int  # commits on head that `into` lacks
    behind: int  # commits on `into` that head lacks


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *NO_PROGRAMS, *args],  # no hook (post-checkout of read-tree -u), no fsmonitor
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="replace",  # bytes that are not UTF-8 show as U+FFFD
        timeout=GIT_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )


def git_version() -> str | None:
    """The version `git --version` on this process's PATH reports (`2.39.5`), None without one."""
    try:
        done = subprocess.run(
            ["git", "--version"],
            capture_output=True,
            text=True,
            errors="replace",  # bytes that are not UTF-8 show as U+FFFD
            timeout=GIT_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", done.stdout)
    return found.group(0) if done.returncode == 0 and found else None


def merge_git_refusal(version: str | None) -> str | None:
    """Why `run_merge` cannot work with this git (missing or older than 2.38), or None."""
    needs = ".".join(map(str, MERGE_TREE_GIT))
    if version is None:
        return f"run_merge needs git {needs} or later, and no git answers on the daemon's PATH"
    if tuple(int(part) for part in version.split(".")[:2]) < MERGE_TREE_GIT:
        return (
            f"run_merge needs git {needs} or later (`git merge-tree --write-tree`); the "
            f"daemon's git is {version}: put a newer git first on its PATH, then "
            "`agent-run api restart`"
        )
    return None


def require_merge_git() -> None:
    """GitError, saying what is needed, before any git call a too old git would fail opaquely."""
    version = git_version()
    refusal = merge_git_refusal(version)
    if refusal:
        needs = ".".join(map(str, MERGE_TREE_GIT))
        raise GitError(refusal, git_version=version, needs=needs)


def branch_tip(root: Path, branch: str, field: str) -> str:
    if _run(root, "check-ref-format", "--branch", branch).returncode != 0:
        raise InvalidRequest(f"{branch!r} is not a valid branch name", field=field)
    found = _run(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    if found.returncode != 0:
        raise InvalidRequest(f"no branch {branch!r} in {root}", field=field)
    return found.stdout.strip()


def _count(root: Path, spec: str) -> int:
    return int(git(root, "rev-list", "--count", spec).strip())


def plan_merge(root: Path, into: str, branch: str) -> MergePlan:
    """What merging `branch` into `into` would give, computed in the object store only."""
    old = branch_tip(root, into, "into")
    head = branch_tip(root, branch, "run_id")
    ahead, behind = _count(root, f"{old}..{head}"), _count(root, f"{head}..{old}")
    if ahead == 0:
        return MergePlan(into, old, head, None, [], 0, behind)
    result = _run(
        root, "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", old, head
    )
    if result.returncode not in (0, 1):
        raise GitError(f"git merge-tree failed in {root}: {result.stderr.strip()[:500]}")
    tree, *names = [part for part in result.stdout.split("\0") if part]
    conflicts = sorted(set(names)) if result.returncode == 1 else []
    if not conflicts and tree == git(root, "rev-parse", f"{old}^{{tree}}").strip():
        tree = None  # its changes are already in `into` (merged by hand, or a squash before)
    return MergePlan(into, old, head, tree, conflicts, ahead, behind)


def subjects(root: Path, plan: MergePlan, limit: int = 50) -> list[str]:
    """The subjects of the branch's commits that `into` lacks, oldest first (at most `limit`)."""
    out = git(root, "log", "--reverse", "--format=%s", f"{plan.old}..{plan.head}")
    found = [line for line in out.splitlines() if line.strip()]
    return found[:limit]


def landing_diff(root: Path, plan: MergePlan, max_bytes: int) -> tuple[str, bool]:
    """Exactly what the merge changes on `into`: the diff from its tip to the merged tree
    (empty without one), cut at `max_bytes`: (diff, truncated)."""
    if plan.tree is None:
        return "", False
    text = git(root, "diff", "--no-ext-diff", plan.old, plan.tree, "--")
    data = text.encode()
    if len(data) > max_bytes:
        return data[:max_bytes].decode(errors="ignore"), True
    return text, False


def make_commit(root: Path, plan: MergePlan, strategy: Strategy, message: str) -> str:
    """The merge commit (parents: into, branch) or the squash commit (parent: into), by the
    configured identity, else agent-run's."""
    if plan.tree is None or plan.conflicts:
        raise GitError("make_commit needs a clean plan")
    parents = ["-p", plan.old] + (["-p", plan.head] if strategy == "merge" else [])
    args = ("commit-tree", plan.tree, *parents, "-m", message)
    if not _has_identity(root):  # never an identity git guessed from $EMAIL or the host name
        return git(root, *args).strip()  # agent-run <agent-run@localhost>
    own = _run(root, *args)
    if own.returncode != 0:
        raise GitError(f"git commit-tree failed in {root}: {own.stderr.strip()[:500]}")
    return own.stdout.strip()


def _has_identity(root: Path) -> bool:
    """Whether git config (the repository's, the user's or the system's) names the author."""
    return all(
        _run(root, "config", "--get", key).returncode == 0 for key in ("user.name", "user.email")
    )


def checked_out_in(root: Path, branch: str) -> list[Path]:
    """The worktrees (the main one included) that have `branch` checked out."""
    found, current = [], None
    for line in git(root, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line.removeprefix("worktree "))
        elif line == f"branch refs/heads/{branch}" and current is not None and current.is_dir():
            found.append(current)  # a worktree whose folder is gone (prunable) has no files
    return found


def untracked_in_the_way(wt: Path, old: str, new_tree: str) -> list[str]:
    """The paths of `wt` that moving its files from `old` to `new_tree` would overwrite although
    git does not track them: ignored or untracked files or folders where the merge adds or
    changes a file, and files (or links) where it needs a folder. `read-tree -m -u` counts an
    ignored file as disposable, so this is checked here, before anything moves."""
    changed = git(
        wt,
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--name-only",
        "--diff-filter=AMT",
        old,
        new_tree,
    ).split("\0")
    tracked = {name for name in git(wt, "ls-files", "-z").split("\0") if name}
    in_the_way: set[str] = set()
    for name in filter(None, changed):
        parts = name.split("/")
        for depth in range(1, len(parts)):  # a leading folder the merge needs
            lead = "/".join(parts[:depth])
            where = wt / lead
            if (
                lead not in tracked
                and os.path.lexists(where)
                and (where.is_symlink() or not where.is_dir())
            ):
                in_the_way.add(lead)
        if name not in tracked and os.path.lexists(wt / name):
            in_the_way.add(name)
    return sorted(in_the_way)


def check_worktrees_can_follow(root: Path, plan: MergePlan, new_tree: str) -> list[Path]:
    """Refuse (Conflict on `into`) when a worktree with `into` checked out has tracked changes,
    or when moving its files to the merge would overwrite a file git does not track (ignored or
    untracked); else those worktrees."""
    worktrees = checked_out_in(root, plan.into)
    for wt in worktrees:
        dirty = git(wt, "status", "--porcelain", "--untracked-files=no").strip()
        if dirty:
            raise Conflict(
                f"{plan.into} is checked out in {wt} with uncommitted changes to tracked files; "
                "commit or discard them, then merge again",
                field="into",
            )
        in_the_way = untracked_in_the_way(wt, plan.old, new_tree)
        if in_the_way:
            shown = ", ".join(in_the_way[:20]) + (" ..." if len(in_the_way) > 20 else "")
            raise Conflict(
                f"{plan.into} is checked out in {wt}, and the merge would overwrite what is there "
                f"but not tracked by git (ignored or untracked): {shown}; move it away or commit "
                "it, then merge again",
                field="into",
                paths=in_the_way,
            )
        trial = _run(wt, "read-tree", "-m", "-u", "-n", plan.old, new_tree)
        if trial.returncode != 0:
            raise Conflict(
                f"{plan.into} is checked out in {wt} and its files cannot follow the merge: "
                f"{trial.stderr.strip()[:300]}",
                field="into",
            )
    return worktrees


def apply_merge(root: Path, plan: MergePlan, new: str) -> None:
    """Move `into` from plan.old to `new` (compare-and-swap; Conflict when it moved meanwhile,
    nothing changed), then bring the worktrees that have it checked out along."""
    worktrees = check_worktrees_can_follow(root, plan, f"{new}^{{tree}}")
    ref = f"refs/heads/{plan.into}"
    swapped = _run(root, "update-ref", "-m", "agent-run merge", ref, new, plan.old)
    if swapped.returncode != 0:
        now = _run(root, "rev-parse", "--verify", "--quiet", ref).stdout.strip()
        raise Conflict(
            f"{plan.into} moved meanwhile (from {plan.old[:12]} to {now[:12] or 'nothing'}); "
            "nothing was changed: merge again to re-check against it",
            field="into",
        )
    for wt in worktrees:
        moved = _run(wt, "read-tree", "-m", "-u", plan.old, new)
        if moved.returncode != 0:  # a file appeared since the trial: put the branch back
            _run(root, "update-ref", "-m", "agent-run merge undone", ref, plan.old, new)
            raise Conflict(
                f"{plan.into} is checked out in {wt} and its files could not follow the merge "
                f"({moved.stderr.strip()[:300]}); the branch was put back",
                field="into",
            )
