"""Git operations, shared by batches and the worker tools: locating the project, pinning the
base, worktrees, commits, review diffs and clean-up. Every call runs the real `git` with a bounded
timeout, and none runs a program the repository's configuration names (`NO_PROGRAMS`)."""

import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agent_run.domain.errors import GitError, InvalidRequest

GIT_TIMEOUT_SECONDS = 60
MAX_DIFF_BYTES = 200_000
PREVIEW_BYTES = 2_000
_GIT_IDENTITY = ["-c", "user.name=agent-run", "-c", "user.email=agent-run@localhost"]
# What would make a git command agent-run runs (outside any sandbox, as the user) start a program
# named by configuration an agent can write: a worktree's `config.worktree`, a submodule's config,
# a plain repository's `.git/config` (SECURITY.md). Hooks and the fsmonitor run on add, commit,
# status, diff; a signing program on commit; a pager or editor never (no terminal, `-m`) but are
# pinned all the same. `-c` reaches submodules' git too. An external diff is refused per
# command (`--no-ext-diff`); filter and textconv drivers are only read from configuration,
# which an agent cannot write in a worktree (engines/sandbox_git.py).
NO_PROGRAMS = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "core.pager=cat",
    "-c",
    "core.editor=:",
    "-c",
    "sequence.editor=:",
]


def git(cwd: Path, *args: str, check: bool = True, errors: str = "replace") -> str:
    """git's stdout; bytes that are not UTF-8 (a file name, a commit message, a file's text) show
    as U+FFFD, or with `errors="surrogateescape"` stay a name the os functions can open."""
    result = subprocess.run(
        ["git", *NO_PROGRAMS, *_GIT_IDENTITY, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        errors=errors,
        timeout=GIT_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )
    if check and result.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {cwd}: {result.stderr.strip()[:500]}")
    return result.stdout


@dataclass(frozen=True)
class Project:
    root: Path  # the repository's top level
    subdir: str  # the project folder relative to root ('' for the root itself)

    @property
    def name(self) -> str:
        return (Path(self.subdir).name if self.subdir else self.root.name) or "project"


def locate_project(folder: str) -> Project:
    path = Path(folder).expanduser()
    if not path.is_absolute() or not path.is_dir():
        raise InvalidRequest(
            f"project {folder} is not an absolute path to a directory", field="project"
        )
    result = subprocess.run(
        ["git", *NO_PROGRAMS, "rev-parse", "--show-toplevel"],
        cwd=path,
        capture_output=True,
        text=True,
        errors="replace",  # bytes that are not UTF-8 show as U+FFFD
        timeout=GIT_TIMEOUT_SECONDS,
    )
    if result.returncode != 0:
        raise InvalidRequest(f"project {folder} is not inside a git repository", field="project")
    root = Path(result.stdout.strip()).resolve()
    subdir = path.resolve().relative_to(root).as_posix()
    return Project(root, "" if subdir == "." else subdir)


def resolve_commit(root: Path, ref: str) -> str:
    result = subprocess.run(
        ["git", *NO_PROGRAMS, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=root,
        capture_output=True,
        text=True,
        errors="replace",  # bytes that are not UTF-8 show as U+FFFD
        timeout=GIT_TIMEOUT_SECONDS,
    )
    if result.returncode != 0:
        raise InvalidRequest(f"base ref {ref!r} is not a commit in {root}", field="base_ref")
    return result.stdout.strip()


def current_branch(root: Path) -> str | None:
    out = git(root, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    return out or None


def base_branch(root: Path, ref: str) -> str | None:
    """The local branch `ref` names (or HEAD is on), else None (a sha, a tag, a remote ref)."""
    if ref == "HEAD":
        return current_branch(root)
    name = ref.removeprefix("refs/heads/")
    found = subprocess.run(
        ["git", *NO_PROGRAMS, "show-ref", "--verify", "--quiet", f"refs/heads/{name}"],
        cwd=root,
        timeout=GIT_TIMEOUT_SECONDS,
    )
    return name if found.returncode == 0 else None


def ref_label(root: Path, ref: str, sha: str) -> str:
    """The branch name when `ref` names a branch (or is HEAD on one), else the short sha; made
    safe for a folder name."""
    if ref == "HEAD":
        ref = current_branch(root) or ref
    is_branch = (
        subprocess.run(
            ["git", *NO_PROGRAMS, "show-ref", "--verify", "--quiet", f"refs/heads/{ref}"],
            cwd=root,
            timeout=GIT_TIMEOUT_SECONDS,
        ).returncode
        == 0
    )
    label = ref if is_branch else sha[:7]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or sha[:7]


def worktree_path(root_dir: Path, project: Project, label: str, batch_id: str, n: int) -> Path:
    """`<project>-<branch or short sha>-<batch>-<n>`, made unique if something is in the way."""
    base = f"{project.name}-{label}-{batch_id.removeprefix('bt_')[-8:]}-{n}"
    candidate, suffix = root_dir / base, 1
    while candidate.exists():
        suffix += 1
        candidate = root_dir / f"{base}.{suffix}"
    return candidate


def worktree_branches(root: Path) -> dict[str, Path]:
    """Each branch checked out in a linked or main worktree whose folder exists: its folder."""
    found: dict[str, Path] = {}
    current = None
    for line in git(root, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line.removeprefix("worktree "))
        elif line.startswith("branch refs/heads/") and current is not None and current.is_dir():
            found[line.removeprefix("branch refs/heads/")] = current
    return found


def branches_under(root: Path, prefix: str) -> list[str]:
    """The local branches whose names start with `prefix/` (`agent-run/<batch>`)."""
    out = git(root, "for-each-ref", "--format=%(refname:short)", f"refs/heads/{prefix}/")
    return sorted(name for name in out.splitlines() if name)


def add_worktree(root: Path, path: Path, branch: str, base_sha: str) -> None:
    """Create the worktree on a new branch at the pinned base; a no-op if it is already there.
    git makes the branch before the folder, so an add that failed there (a worktree root that is
    not a folder, a full disk, a kill) left the branch alone at the base: the next add reuses it.
    A branch of that name anywhere else is refused, never moved."""
    if (path / ".git").exists():
        return
    tip = git(
        root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", check=False
    ).strip()
    if not tip:
        git(root, "worktree", "add", "-b", branch, str(path), base_sha)
    elif tip == base_sha:
        git(root, "worktree", "prune")  # a registration whose folder is gone holds the branch
        git(root, "worktree", "add", str(path), branch)
    else:
        raise GitError(
            f"branch {branch} already exists at {tip[:12]}, not at the batch's base "
            f"{base_sha[:12]}; refusing to reuse it"
        )


def commit_files(worktree: Path, message: str, files: list[str], branch: str) -> str:
    """Stage exactly `files` (paths inside the worktree) and commit them on `branch`, the run's
    own; return the new sha. Refused unless the worktree's HEAD is on `branch`: a model that
    points HEAD at another branch must not get agent-run to commit there. The commit is made
    with plumbing onto `branch` itself (a compare-and-swap from its tip), never through HEAD."""
    if not files:
        raise InvalidRequest("create_commit needs at least one file", field="files")
    top = worktree.resolve()
    for index, name in enumerate(files):
        target = (worktree / name).resolve()
        if top != target and top not in target.parents:
            raise InvalidRequest(f"{name} is outside the worktree", field=f"files.{index}")
    ref = f"refs/heads/{branch}"
    head = git(worktree, "symbolic-ref", "--quiet", "HEAD", check=False).strip()
    if head != ref:
        raise GitError(
            f"refusing to commit: the worktree's HEAD is on {head or 'a detached commit'}, "
            f"not on the run's branch {ref}"
        )
    parent = git(worktree, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    git(worktree, "add", "--", *files)
    if not git(worktree, "diff", "--cached", "--no-ext-diff", "--name-only", parent).strip():
        raise InvalidRequest("nothing to commit: the files have no changes", field="files")
    tree = git(worktree, "write-tree").strip()
    sha = git(worktree, "commit-tree", tree, "-p", parent, "-m", message).strip()
    subject = (message.splitlines() or [""])[0]
    git(worktree, "update-ref", "-m", f"commit: {subject}", ref, sha, parent)
    return sha


def commits_since(worktree: Path, base_sha: str) -> list[str]:
    out = git(worktree, "log", "--format=%H %s", f"{base_sha}..HEAD", check=False)
    return [line for line in out.splitlines() if line.strip()]


@dataclass(frozen=True)
class UntrackedFile:
    path: str
    preview: str


def untracked(worktree: Path) -> list[UntrackedFile]:
    """Untracked files with the start of each: read without following any link (a model can
    plant `leak -> ~/.ssh/id_ed25519`; this runs outside its sandbox, as the user). A link is
    shown as `symlink → target`, anything not a regular file is left out, at most
    PREVIEW_BYTES are read."""
    listed = git(
        worktree, "ls-files", "-z", "--others", "--exclude-standard", errors="surrogateescape"
    )
    found = []
    for name in filter(None, listed.split("\0")):
        preview = _preview(worktree, name)
        if preview is not None:  # read by its real name, shown with U+FFFD for bytes not UTF-8
            shown = os.fsencode(name).decode("utf-8", errors="replace")
            found.append(UntrackedFile(shown, preview))
    return found


def _preview(worktree: Path, name: str) -> str | None:
    """The start of `name` under `worktree`, each folder on the way opened without following
    links (no check-then-open race); None for what is neither a regular file nor a link, ""
    when it cannot be read (a folder on the way became a link, it went away)."""
    parts = Path(name).parts
    if not parts or ".." in parts or Path(name).is_absolute():
        return None
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder = os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=folder)
            os.close(folder)
            folder = inner
        info = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return f"symlink → {os.readlink(parts[-1], dir_fd=folder)}"
        if not stat.S_ISREG(info.st_mode):
            return None
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | nofollow, dir_fd=folder)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None  # swapped for something else since the stat
            data = file.read(PREVIEW_BYTES)
    except OSError:
        return ""  # a folder on the way is a link (ELOOP, ENOTDIR), or it went away
    finally:
        os.close(folder)
    return data.decode("utf-8", errors="replace")


def diff_against(worktree: Path, base_sha: str) -> tuple[str, bool]:
    """Committed and uncommitted changes of tracked files against the base: (diff, truncated)."""
    text = git(worktree, "diff", "--no-ext-diff", base_sha, "--")
    if len(text.encode()) > MAX_DIFF_BYTES:
        return text.encode()[:MAX_DIFF_BYTES].decode(errors="ignore"), True
    return text, False


def dirty_files(worktree: Path) -> list[str]:
    return [
        line[3:] for line in git(worktree, "status", "--porcelain").splitlines() if line.strip()
    ]


def unmerged_commits(root: Path, branch: str, into: str) -> int:
    """Commits on `branch` that `into` (the project's base branch tip) does not contain."""
    out = git(root, "rev-list", "--count", f"{into}..{branch}", check=False).strip()
    return int(out) if out.isdigit() else 0


def remove_worktree(
    root: Path, path: Path | None, branch: str | None, *, force: bool, merged: bool = False
) -> None:
    """Remove the worktree (None: a branch alone) and its branch; `merged`: the branch was merged
    by `run_merge` (a squash leaves its commits off the target, so `git branch -d` refuses it)."""
    if path is not None and path.exists():
        git(root, "worktree", "remove", *(["--force"] if force else []), str(path))
    else:
        git(root, "worktree", "prune")
    if branch:
        git(root, "branch", "-D" if force or merged else "-d", branch)
