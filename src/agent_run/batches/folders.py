"""`list_dir` and `project_inspect`: the web UI's folder picker, confined to the allowed roots.

The roots are `[web] roots` in config (default: the daemon user's home), never `/`. Every path
is resolved (symlinks followed) before it is checked, so a link cannot lead out of a root.
"""

import asyncio
import os
import subprocess
from pathlib import Path

from agent_run.domain.batch_models import DirEntry, DirListing, FolderParams, ProjectInfo
from agent_run.domain.errors import InvalidRequest
from agent_run.services.context import ServiceContext
from agent_run.system import git as g

MAX_ENTRIES = 500


def allowed_roots(ctx: ServiceContext) -> list[Path]:
    roots = ctx.config.web.roots or [str(Path.home())]
    return [Path(r).expanduser().resolve() for r in roots]


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def confined(ctx: ServiceContext, raw: str) -> Path:
    """The resolved folder, if it is an absolute path to a directory under a root."""
    if "\0" in raw:
        raise InvalidRequest("the path contains a NUL byte", field="path")
    path = Path(raw)
    if not path.is_absolute():
        raise InvalidRequest(f"{raw} is not an absolute path", field="path")
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise InvalidRequest(f"{raw} cannot be resolved: {_reason(exc)}", field="path") from None
    if not _under(resolved, allowed_roots(ctx)):
        raise InvalidRequest(
            f"{raw} is outside the allowed roots ([web] roots in config.toml)", field="path"
        )
    try:
        is_dir = resolved.is_dir()
    except OSError as exc:
        raise InvalidRequest(f"{raw} cannot be read: {_reason(exc)}", field="path") from None
    if not is_dir:
        raise InvalidRequest(f"{raw} is not a directory", field="path")
    return resolved


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _folder_entry(item: os.DirEntry[str], roots: list[Path]) -> DirEntry | None:
    """A listed folder (symlinks followed) under the roots; None for anything else, or for an
    entry that cannot be resolved (a symlink loop, a folder we may not read)."""
    try:
        target = Path(item.path).resolve()
        if not target.is_dir() or not _under(target, roots):
            return None
        return DirEntry(name=item.name, path=str(target), is_repository=(target / ".git").exists())
    except (OSError, RuntimeError):
        return None


def _listing(ctx: ServiceContext, raw: str | None) -> DirListing:
    roots = allowed_roots(ctx)
    if raw is None:
        entries = [
            DirEntry(name=str(r), path=str(r), is_repository=(r / ".git").exists())
            for r in roots
            if r.is_dir()
        ]
        return DirListing(path=None, parent=None, roots=[str(r) for r in roots], entries=entries)
    folder = confined(ctx, raw)
    entries: list[DirEntry] = []
    truncated = False
    try:
        with os.scandir(folder) as it:
            items = sorted(it, key=lambda e: e.name.lower())
    except OSError as exc:
        raise InvalidRequest(f"{raw} cannot be listed: {_reason(exc)}", field="path") from None
    for item in items:
        if item.name.startswith("."):
            continue
        entry = _folder_entry(item, roots)
        if entry is None:
            continue
        if len(entries) >= MAX_ENTRIES:
            truncated = True
            break
        entries.append(entry)
    parent = folder.parent if folder != folder.parent and _under(folder.parent, roots) else None
    return DirListing(
        path=str(folder),
        parent=str(parent) if parent else None,
        roots=[str(r) for r in roots],
        entries=entries,
        truncated=truncated,
    )


async def list_dir(ctx: ServiceContext, p: FolderParams) -> DirListing:
    return await asyncio.to_thread(_listing, ctx, p.path)


def _inspect(ctx: ServiceContext, raw: str | None) -> ProjectInfo:
    if raw is None:
        raise InvalidRequest("give the folder to inspect", field="path")
    folder = confined(ctx, raw)
    try:
        project = g.locate_project(str(folder))
    except InvalidRequest:
        return ProjectInfo(path=str(folder), is_repository=False)
    head = subprocess.run(
        ["git", "log", "-1", "--format=%H%n%s"],
        cwd=project.root,
        capture_output=True,
        text=True,
        errors="replace",  # bytes that are not UTF-8 show as U+FFFD
        timeout=g.GIT_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )
    sha, _, subject = head.stdout.strip().partition("\n") if head.returncode == 0 else ("", "", "")
    return ProjectInfo(
        path=str(folder),
        is_repository=True,
        repository_root=str(project.root),
        subdir=project.subdir,
        branch=g.current_branch(project.root),
        head=sha or None,
        head_subject=subject or None,
    )


async def project_inspect(ctx: ServiceContext, p: FolderParams) -> ProjectInfo:
    return await asyncio.to_thread(_inspect, ctx, p.path)
