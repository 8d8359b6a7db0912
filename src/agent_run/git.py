"""Git operations, shared by batches and the worker tools: locating the project, pinning the
base, worktrees, commits, review diffs and clean-up. Every call runs the real `git` with a bounded timeout."""

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agent_run.domain.errors import GitError, InvalidRequest

GIT_TIMEOUT_SECONDS = 60
MAX_DIFF_BYTES = 200_000
PREVIEW_BYTES = 2_000
_GIT_IDENTITY = ["-c", "user.name=agent-run", "-c", "user.email=agent-run@localhost"]


def git(cwd: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(
        ["git", *_GIT_IDENTITY, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
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
        ["git", "rev-parse", "--show-toplevel"],
        cwd=path,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_SECONDS,
    )
    if result.returncode != 0:
        raise InvalidRequest(f"project {folder} is not inside a git repository", field="project")
    root = Path(result.stdout.strip()).resolve()
    subdir = path.resolve().relative_to(root).as_posix()
    return Project(root, "" if subdir == "." else subdir)


def resolve_commit(root: Path, ref: str) -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_SECONDS,
    )
    if result.returncode != 0:
        raise InvalidRequest(f"base ref {ref!r} is not a commit in {root}", field="base_ref")
    return result.stdout.strip()


def current_branch(root: Path) -> str | None:
    out = git(root, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    return out or None


def ref_label(root: Path, ref: str, sha: str) -> str:
    """The branch name when `ref` names a branch (or is HEAD on one), else the short sha; made
    safe for a folder name."""
    if ref == "HEAD":
        ref = current_branch(root) or ref
    is_branch = (
        subprocess.run(
            ["git", "show-ref", "--verify", "--quiet", f"refs/heads/{ref}"],
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


def add_worktree(root: Path, path: Path, branch: str, base_sha: str) -> None:
    """Create the worktree on a new branch at the pinned base; a no-op if it is already there."""
    if (path / ".git").exists():
        return
    git(root, "worktree", "add", "-b", branch, str(path), base_sha)


def commit_files(worktree: Path, message: str, files: list[str]) -> str:
    """Stage exactly `files` (paths inside the worktree) and commit them; return the new sha."""
    if not files:
        raise InvalidRequest("create_commit needs at least one file", field="files")
    top = worktree.resolve()
    for index, name in enumerate(files):
        target = (worktree / name).resolve()
        if top != target and top not in target.parents:
            raise InvalidRequest(f"{name} is outside the worktree", field=f"files.{index}")
    git(worktree, "add", "--", *files)
    if not git(worktree, "diff", "--cached", "--name-only").strip():
        raise InvalidRequest("nothing to commit: the files have no changes", field="files")
    git(worktree, "commit", "-q", "-m", message)
    return git(worktree, "rev-parse", "HEAD").strip()


def commits_since(worktree: Path, base_sha: str) -> list[str]:
    out = git(worktree, "log", "--format=%H %s", f"{base_sha}..HEAD", check=False)
    return [line for line in out.splitlines() if line.strip()]


@dataclass(frozen=True)
class UntrackedFile:
    path: str
    preview: str


def untracked(worktree: Path) -> list[UntrackedFile]:
    names = git(worktree, "ls-files", "--others", "--exclude-standard").splitlines()
    found = []
    for name in names:
        try:
            data = (worktree / name).read_bytes()[:PREVIEW_BYTES]
            preview = data.decode("utf-8", errors="replace")
        except OSError:
            preview = ""
        found.append(UntrackedFile(name, preview))
    return found


def diff_against(worktree: Path, base_sha: str) -> tuple[str, bool]:
    """Committed and uncommitted changes of tracked files against the base: (diff, truncated)."""
    text = git(worktree, "diff", base_sha, "--")
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


def remove_worktree(root: Path, path: Path, branch: str | None, *, force: bool) -> None:
    if path.exists():
        git(root, "worktree", "remove", *(["--force"] if force else []), str(path))
    else:
        git(root, "worktree", "prune")
    if branch:
        git(root, "branch", "-D" if force else "-d", branch)
