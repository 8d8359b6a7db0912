"""A batch run's workspace on a host: the pinned base commit sent with `git bundle` into a bare
repository there, the run's worktree made there on the run's branch, and, when the run ends,
its commits brought back by `git bundle` into the local worktree (a fast-forward), so review,
reviewers and `run_merge` work on them here as for a local run (docs/scaling.md).

On the host: `<workspace>/<batch id>/repo.git` and `<workspace>/<batch id>/<worktree name>`
(the local worktree's folder name). Every step is idempotent: a rerun or a restarted daemon
prepares the same folders again without harm. The runs of one batch start at once: the base is
probed and sent under one lock per (host, batch), so it is sent once, and the bundle has a name
of its own on the host.
"""

import asyncio
import shlex
import subprocess
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent_run.config.hosts import HostConfig
from agent_run.domain import errors
from agent_run.system import git

SSH_GIT_TIMEOUT_SECONDS = 600
# One lock per (host, batch folder): its runs' base sends never overlap.
_SENDING: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)

# $1: the batch's folder on the host (relative: under the user's home); $2: the pinned base.
_PROBE = """set -e
case "$1" in /*) root="$1" ;; *) root="$HOME/$1" ;; esac
mkdir -p "$root"
cd "$root"
[ -d repo.git ] || git init -q --bare repo.git
if git -C repo.git cat-file -e "$2^{commit}" 2>/dev/null; then echo have; else echo need; fi
pwd -P
"""
# stdin: a bundle of refs/agent-run/base/*; $1: the batch's folder (absolute).
_RECEIVE = """set -e
bundle=$(mktemp "$1/base.XXXXXX")
trap 'rm -f "$bundle"' EXIT
cat > "$bundle"
git -C "$1/repo.git" fetch -q "$bundle" "+refs/agent-run/base/*:refs/agent-run/base/*"
"""
# $1: the batch's folder, $2: the worktree's name, $3: its branch, $4: the pinned base.
_WORKTREE = """set -e
cd "$1"
if [ ! -e "$2/.git" ]; then
  if git -C repo.git rev-parse -q --verify "refs/heads/$3" >/dev/null; then
    git -C repo.git worktree add -q "$1/$2" "$3"
  else
    git -C repo.git worktree add -q -b "$3" "$1/$2" "$4"
  fi
fi
cd "$2" && pwd -P
"""


def _ssh(config: HostConfig, script: str, *args: str, stdin: Any = None) -> bytes:
    """`sh -c SCRIPT sh ARGS...` on the host over ssh; its stdout. HostUnreachable when ssh
    cannot connect (255), GitError naming the host when the script fails there."""
    argv = config.ssh_argv(["sh", "-c", script, "sh", *args])
    try:
        done = subprocess.run(
            argv,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=SSH_GIT_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise errors.HostUnreachable(
            f"host {config.ssh}: git over ssh did not finish within {SSH_GIT_TIMEOUT_SECONDS}s",
            field="host",
        ) from None
    said = done.stderr.decode(errors="replace").strip()[-500:]
    if done.returncode == 255:
        raise errors.HostUnreachable(f"host {config.ssh}: {said}", field="host")
    if done.returncode != 0:
        raise errors.GitError(f"on host {config.ssh}: {shlex.join(args)}: {said}")
    return done.stdout


def prepare_workspace(config: HostConfig, workspace: dict[str, Any]) -> str:
    """Make the run's worktree on the host (sending the base first if it is not there); the
    run's working folder on the host (the worktree, or its project subfolder)."""
    folder = f"{config.workspace.rstrip('/')}/{workspace['batch_id']}"
    with _SENDING[(config.ssh, folder)]:
        root = _send_base(config, workspace, folder)
    worktree = (
        _ssh(config, _WORKTREE, root, workspace["name"], workspace["branch"], workspace["base_sha"])
        .decode()
        .strip()
    )
    return f"{worktree}/{workspace['subdir']}" if workspace.get("subdir") else worktree


def _send_base(config: HostConfig, workspace: dict[str, Any], folder: str) -> str:
    """The batch's folder on the host (absolute), with the pinned base in its bare repository:
    sent by `git bundle` unless it is there already."""
    probe = _ssh(config, _PROBE, folder, workspace["base_sha"]).decode().split()
    need, root = probe[0] == "need", probe[1]
    if need:
        project = Path(workspace["project_root"])
        ref = f"refs/agent-run/base/{workspace['batch_id']}"
        git.git(project, "update-ref", ref, workspace["base_sha"])
        try:
            with tempfile.TemporaryFile() as bundle:
                made = subprocess.run(
                    ["git", "-C", str(project), "bundle", "create", "-", ref],
                    stdout=bundle,
                    stderr=subprocess.PIPE,
                    timeout=SSH_GIT_TIMEOUT_SECONDS,
                )
                if made.returncode != 0:
                    raise errors.GitError(
                        f"git bundle create failed: {made.stderr.decode()[-300:]}"
                    )
                bundle.seek(0)
                _ssh(config, _RECEIVE, root, stdin=bundle)
        finally:
            git.git(project, "update-ref", "-d", ref, check=False)
    return root


def _bring_back(config: HostConfig, workspace: dict[str, Any]) -> str | None:
    """The run's branch on the host, fast-forwarded into the local worktree; the new tip, or
    None when there was nothing new."""
    folder = f"{config.workspace.rstrip('/')}/{workspace['batch_id']}"
    repo = folder if folder.startswith("/") else f"$HOME/{folder}"
    tip_script = f'git -C "{repo}/repo.git" rev-parse -q --verify "refs/heads/$1" || true'
    remote_tip = _ssh(config, tip_script, workspace["branch"]).decode().strip()
    local = Path(workspace["local_worktree"])
    local_tip = git.git(local, "rev-parse", "HEAD").strip()
    if not remote_tip or remote_tip in (local_tip, workspace["base_sha"]):
        return None
    bundle_script = f'git -C "{repo}/repo.git" bundle create - "refs/heads/$1" "^$2"'
    data = _ssh(config, bundle_script, workspace["branch"], workspace["base_sha"])
    with tempfile.NamedTemporaryFile(suffix=".bundle") as bundle:
        bundle.write(data)
        bundle.flush()
        git.git(local, "fetch", "-q", bundle.name, f"refs/heads/{workspace['branch']}")
    git.git(local, "merge", "--ff-only", "-q", "FETCH_HEAD")
    return remote_tip


async def collect_commits(config: HostConfig, workspace: dict[str, Any]) -> str | None:
    """Bring the run's commits back (off the event loop)."""
    return await asyncio.to_thread(_bring_back, config, workspace)


async def prepare(config: HostConfig, workspace: dict[str, Any]) -> str:
    return await asyncio.to_thread(prepare_workspace, config, workspace)


# $1: the batch's folder, $2: the worktree's name, $3: its branch.
_CLEANUP = """set -e
case "$1" in /*) root="$1" ;; *) root="$HOME/$1" ;; esac
[ -d "$root/repo.git" ] || exit 0
git -C "$root/repo.git" worktree remove --force "$root/$2" 2>/dev/null || rm -rf "$root/$2"
git -C "$root/repo.git" worktree prune
git -C "$root/repo.git" branch -D "$3" >/dev/null 2>&1 || true
if ! git -C "$root/repo.git" worktree list --porcelain | grep '^worktree ' | grep -qv "/repo.git$"; then
  rm -rf "$root"
fi
"""


def remove_workspace(config: HostConfig, workspace: dict[str, Any]) -> None:
    """The run's worktree and branch on the host; the batch's folder there once it holds no
    worktree any more."""
    folder = f"{config.workspace.rstrip('/')}/{workspace['batch_id']}"
    _ssh(config, _CLEANUP, folder, workspace["name"], workspace["branch"])


async def cleanup(config: HostConfig, workspace: dict[str, Any]) -> None:
    await asyncio.to_thread(remove_workspace, config, workspace)
