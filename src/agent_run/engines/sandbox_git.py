"""What a sandbox sees of a git worktree's repository: enough for `git commit` on its own branch.

A linked worktree's `.git` file names its admin folder (`<repo>/.git/worktrees/<name>`), which
names the repository's common git dir. The common dir is mounted read-only (its `config`,
`hooks`, `packed-refs`, `info` and every other branch's refs), the other worktrees' admin
folders are hidden under an empty tmpfs, and only what a commit on this worktree's branch
writes is read-write: the object store, the folder holding the branch's ref and its reflog
(made first when the ref is packed, so that no wider folder is ever opened), and this
worktree's own admin folder. What in that admin folder agent-run's own `git` calls (run outside
the sandbox) rely on stays read-only: where the repository is (the worktree's `.git`,
`commondir`, `gitdir`), which branch HEAD is on (`HEAD`: a commit moves the branch, not HEAD),
and the worktree's own configuration (`config.worktree`, made empty when absent: with
`extensions.worktreeConfig` git reads hooks, filters, fsmonitor and includes from it).
"""

import os
from dataclasses import dataclass
from pathlib import Path

POINTER_FILES = ("commondir", "gitdir", "HEAD")
WORKTREE_CONFIG = "config.worktree"


@dataclass(frozen=True)
class Bind:
    """One mount: `source` at `target`, read-only unless `writable`; `tmpfs` mounts an empty
    private folder at `target` instead (hiding what is under it)."""

    source: str
    target: str
    writable: bool = False
    tmpfs: bool = False


@dataclass(frozen=True)
class Worktree:
    dot_git: Path  # the worktree's `.git` file
    admin: Path  # <common>/worktrees/<name>
    common: Path  # the repository's git dir


def linked_worktree(folder: str) -> Worktree | None:
    """The repository of a linked git worktree (`.git` is a file naming it), or None."""
    dot_git = Path(folder) / ".git"
    try:
        text = dot_git.read_text() if dot_git.is_file() else ""
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    admin = (Path(folder) / text.removeprefix("gitdir:").strip()).resolve()
    try:
        common = (admin / (admin / "commondir").read_text().strip()).resolve()
    except OSError:
        common = admin
    return Worktree(dot_git, admin, common)


def _branch_ref(admin: Path) -> str | None:
    """`refs/heads/...` the worktree's HEAD is on, or None (detached, unreadable)."""
    try:
        head = (admin / "HEAD").read_text().strip()
    except OSError:
        return None
    ref = head.removeprefix("ref:").strip()
    return ref if head.startswith("ref:") and ref.startswith("refs/heads/") else None


def _made_folder(common: Path, relative: Path) -> Path | None:
    """`common/relative`, made if missing (a packed ref has no folder: its nearest existing
    parent, `refs/heads/` say, would open every branch); None when it cannot be made."""
    folder = common / relative
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if folder.is_dir() and not folder.is_symlink() else None


def _writable(path: Path) -> Bind:
    return Bind(str(path), str(path), writable=True)


def commit_binds(tree: Worktree) -> list[Bind]:
    """What `git commit` on the worktree's branch writes: objects, the branch's ref folder and
    reflog folder, the worktree's admin folder (its index, own reflog; HEAD stays read-only)."""
    binds = [_writable(tree.common / "objects")]
    ref = _branch_ref(tree.admin)
    if ref is None:
        return binds
    folders = [Path(ref).parent]
    if (tree.common / "logs").is_dir():
        folders.append(Path("logs", ref).parent)
    made = [_made_folder(tree.common, folder) for folder in folders]
    return binds + [_writable(folder) for folder in made if folder is not None]


def _worktree_config(admin: Path) -> Path | None:
    """The admin folder's `config.worktree`, made empty if absent (so that the model cannot
    create one); None when it cannot be made."""
    path = admin / WORKTREE_CONFIG
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    os.close(fd)
    return path


def git_binds(folder: str, writable: bool) -> list[Bind]:
    """A linked worktree's repository as its sandbox sees it (read-only but for what a commit on
    its branch writes under `writable`); other worktrees' admin folders hidden."""
    tree = linked_worktree(folder)
    if tree is None:
        return []
    common = str(tree.common)
    binds = [Bind(common, common)]
    if tree.admin == tree.common:
        return binds
    if (tree.common / "worktrees").is_dir():
        binds.append(Bind("", str(tree.common / "worktrees"), tmpfs=True))
    binds.append(Bind(str(tree.admin), str(tree.admin), writable))
    if not writable:
        return binds
    pointers: list[Path | None] = [tree.admin / name for name in POINTER_FILES]
    pointers += [tree.dot_git, _worktree_config(tree.admin)]
    binds += [Bind(str(p), str(p)) for p in pointers if p is not None and p.is_file()]
    return binds + commit_binds(tree)
