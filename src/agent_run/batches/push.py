"""`run_push`: push a settled run's branch (or the branch run_merge merged it into) to a git
remote the user configured, never forced; then, if asked, open a pull request into the batch's
base branch with `gh pr create` (gh installed, the remote on GitHub), or else say where one is
opened (a GitHub or GitLab compare page) or why not. A remote's credentials never leave git:
its URL is shown without them, and git is never let to prompt for any."""

import asyncio
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

from agent_run.batches.service import _run_context, _settled, scheduler
from agent_run.domain import push_models as pm
from agent_run.domain.errors import GitError, InvalidRequest
from agent_run.services.context import ServiceContext
from agent_run.system import git
from agent_run.system.git_merge import branch_tip

PUSH_TIMEOUT_SECONDS = 300
GH_TIMEOUT_SECONDS = 120
# host/owner/repo of a GitHub or GitLab remote: https://host/o/r(.git), git@host:o/r(.git),
# ssh://git@host/o/r(.git)
_FORGE = re.compile(
    r"^(?:https?://(?:[^@/]+@)?|ssh://(?:[^@/]+@)?|[^@/]+@)"
    r"(?P<host>github\.com|gitlab\.com)[:/](?P<path>[^\s]+?)(?:\.git)?/?$"
)


def shown_url(text: str) -> str:
    """A remote's URL (or git's words about it) without the credentials an https URL may
    carry (`user:token@`)."""
    return re.sub(r"(https?://)[^@/\s]+@", r"\1", text.strip())


def remote_url(root: Path, remote: str) -> str:
    """The remote's URL; InvalidRequest naming the configured ones when there is none."""
    names = git.git(root, "remote").split()
    if remote not in names:
        known = ", ".join(names) or "none: add one with git remote add"
        raise InvalidRequest(
            f"no git remote {remote!r} in {root} (remotes: {known})", field="remote"
        )
    return git.git(root, "remote", "get-url", remote).strip()


def _source(batch_row: sqlite3.Row, run: sqlite3.Row, p: pm.RunPushParams) -> str:
    """The local branch to push: the run's, or (merged) the branch it was merged into."""
    if p.merged:
        if not run["merged_sha"] or not run["merged_into"]:
            raise InvalidRequest(
                f"run {run['id']} was not merged yet (run_merge); push its branch instead",
                field="merged",
            )
        return str(run["merged_into"])
    if not run["branch"]:
        raise InvalidRequest(f"run {run['id']} has no branch to push", field="run_id")
    return str(run["branch"])


def push_branch(root: Path, remote: str, local: str, target: str) -> None:
    """`git push REMOTE refs/heads/LOCAL:refs/heads/TARGET`, never forced, no prompt, no hook."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # no terminal to ask on: fail, say why
    try:
        done = subprocess.run(
            [
                "git",
                *git.NO_PROGRAMS,
                "push",
                "--porcelain",
                remote,
                f"refs/heads/{local}:refs/heads/{target}",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PUSH_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise GitError(
            f"git push to {remote} took over {PUSH_TIMEOUT_SECONDS}s", remote=remote
        ) from None
    if done.returncode != 0:
        said = shown_url((done.stderr or done.stdout).strip())[:800]
        raise GitError(f"git push to {remote} failed: {said}", remote=remote)


def _push(batch_row: sqlite3.Row, run: sqlite3.Row, p: pm.RunPushParams) -> pm.RunPushResult:
    """The git side, off the event loop."""
    root = Path(batch_row["project_root"])
    url = remote_url(root, p.remote)
    local = _source(batch_row, run, p)
    sha = branch_tip(root, local, "merged" if p.merged else "run_id")
    target = p.branch or local
    if git.git(root, "check-ref-format", "--branch", target, check=False).strip() != target:
        raise InvalidRequest(f"{target!r} is not a valid branch name", field="branch")
    if not p.merged and git.unmerged_commits(root, local, batch_row["base_sha"]) == 0:
        raise InvalidRequest(
            f"run {run['id']}'s branch has no commit to push (uncommitted work is never "
            "pushed: ask the run to commit it)",
            field="run_id",
        )
    push_branch(root, p.remote, local, target)
    result = pm.RunPushResult(
        run_id=run["id"],
        remote=p.remote,
        remote_url=shown_url(url),
        local_ref=f"refs/heads/{local}",
        remote_ref=f"refs/heads/{target}",
        sha=sha,
        message=f"pushed {local} ({sha[:12]}) to {p.remote} as {target}",
    )
    if p.pull_request:
        opened = open_pull_request(root, batch_row, run, url, target)
        result = result.model_copy(update={"pull_request": opened})
    return result


def pr_command(owner_repo: str, head: str, base: str, title: str, body: str) -> list[str]:
    """The `gh pr create` argv for a pull request from `head` into `base` of owner/repo."""
    return [
        "gh",
        "pr",
        "create",
        "--repo",
        owner_repo,
        "--head",
        head,
        "--base",
        base,
        "--title",
        title,
        "--body",
        body,
    ]


def compare_url(host: str, path: str, base: str, head: str) -> str:
    if host == "gitlab.com":
        return (
            f"https://gitlab.com/{path}/-/merge_requests/new?merge_request%5Bsource_branch%5D="
            f"{head}&merge_request%5Btarget_branch%5D={base}"
        )
    return f"https://github.com/{path}/compare/{base}...{head}?expand=1"


def open_pull_request(
    root: Path, batch_row: sqlite3.Row, run: sqlite3.Row, url: str, head: str
) -> pm.PullRequest:
    """`gh pr create` on GitHub when gh is installed; else the compare page, or why not."""
    base = batch_row["base_branch"]
    if not base:
        return pm.PullRequest(
            created=False,
            message="the batch has no base branch (its base_ref is not a branch): nothing to "
            "open a pull request into",
        )
    forge = _FORGE.match(url.strip())
    if forge is None:
        return pm.PullRequest(
            created=False,
            message=f"the remote {shown_url(url)} is not on GitHub or GitLab: open the pull "
            "request in its own web page",
        )
    host, path = forge["host"], forge["path"]
    page = compare_url(host, path, base, head)
    gh = shutil.which("gh")
    if host != "github.com" or gh is None:
        why = (
            "gh is not installed" if host == "github.com" else "gh opens GitHub pull requests only"
        )
        return pm.PullRequest(created=False, url=page, message=f"{why}: open {page}")
    title = batch_row["title"] or run["title"]
    body = f"From run {run['id']} ({run['title']}) of agent-run batch {batch_row['id']}."
    argv = pr_command(path, head, base, title, body)
    done = _run_gh([gh, *argv[1:]], root)
    if done.returncode != 0:
        said = shown_url(done.stderr or done.stdout)[:500]
        return pm.PullRequest(
            created=False,
            url=page,
            command=argv,
            message=f"gh pr create failed ({said}): open {page}",
        )
    opened = done.stdout.strip().splitlines()[-1:] or [page]
    return pm.PullRequest(created=True, url=opened[0], command=argv, message="pull request opened")


def _run_gh(argv: list[str], root: Path) -> "subprocess.CompletedProcess[str]":
    """gh, never prompting; a timeout is a failure that says so."""
    try:
        return subprocess.run(
            argv,
            cwd=root,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=GH_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "GH_PROMPT_DISABLED": "1"},
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 1, "", f"no answer in {GH_TIMEOUT_SECONDS}s")


async def run_push(ctx: ServiceContext, p: pm.RunPushParams) -> pm.RunPushResult:
    """Check the run is settled and mark it busy (a rerun or clean waits); git runs outside
    the scheduler's lock."""
    sched = scheduler(ctx)
    async with sched.lock:
        batch_row, run = await _run_context(ctx, p.run_id)
        _settled(sched, run, "push", needs_worktree=False)  # a push reads only the branch
        sched.busy.add(run["id"])
    try:
        return await asyncio.to_thread(_push, batch_row, run, p)
    finally:
        sched.busy.discard(run["id"])
