"""The engine's sandbox: what one execution may see, as a bubblewrap (`bwrap`) command line.

One function turns a plan and a launch spec into the bwrap argv (`sandbox_argv`); one probe says
whether bwrap can start here (`sandbox_refusal`). Everything the sandbox lets in is listed in
`sandbox_binds`, and nowhere else: system directories (and /etc/resolv.conf's target when it is a
link out of them), the Python that runs agent-run's own helpers, the engine's program tree and
its script interpreter's install tree read-only; the workdir (read-write only under the `write`
profile), the read roots read-only, a git worktree's repository as `sandbox_git` mounts it; the
generated engine home, the execution's sandbox folder and a native sign-in's credential folder
(its other entries hidden) read-write. agent-run's home is masked by an empty tmpfs wherever one
of those shows it (a workdir of `~`), the run's own folders in it bound again on top. A private
/tmp (also TMPDIR), /proc and PID namespace, torn down when bwrap's parent dies; a user
namespace with every capability dropped and never uid 0 inside (root outside included). The
network is shared: the engine reaches its provider or the credential broker on loopback.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.registry import sign_in_for
from agent_run.engines.sandbox_git import Bind, git_binds
from agent_run.engines.signin import is_native

BWRAP = "bwrap"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
NAMESPACES = ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts")
# Whoever started bwrap dies (a supervisor killed, a verify_command's timeout): so does the
# sandbox, every process in it.
LIFETIME = ("--die-with-parent",)
RESOLV_CONF = "/etc/resolv.conf"
SHEBANG_BYTES = 256
PRIVATE_TMP = "/tmp"
PROBE_TIMEOUT_SECONDS = 10.0
# Certificate files the engine's environment names (engines/environment.py passes them):
# read-only, wherever they are, or a TLS proxy's CA would be invisible inside.
CERTIFICATE_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")
# Who the engine is inside: never root (a model running as uid 0 inside, even without
# capabilities, passes every "am I root" check of the tools it runs); the caller's own uid
# otherwise.
UNPRIVILEGED_UID = 1000
# A sandboxed command's HOME: the private /tmp (the user's home is not mounted).
COMMAND_HOME = PRIVATE_TMP


class SandboxUnavailable(Exception):
    """bubblewrap cannot start a sandbox here; `message` says why and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _program_tree(path: str) -> str:
    """The folder a program lives in, widened to its outermost `node_modules` (a node CLI
    reaches files all over its package tree, a native binary of a sibling package included)."""
    parts = Path(path).parts
    if "node_modules" in parts:
        return str(Path(*parts[: parts.index("node_modules") + 1]))
    return str(Path(path).parent)


def program_binds(argv0: str, search_path: str | None) -> list[Bind]:
    """The engine program's tree read-only, at its real path and at the path it is named by,
    and its script interpreter's (`#!/usr/bin/env node`)."""
    found = shutil.which(argv0, path=search_path) or argv0
    if not os.path.isabs(found):
        return []
    real = os.path.realpath(found)
    binds = [Bind(_program_tree(real), _program_tree(real))]
    named = _program_tree(os.path.abspath(found))
    if named != binds[0].target:
        binds.append(Bind(os.path.realpath(named), named))
    return binds + interpreter_binds(real, search_path)


def _system(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)


def interpreter_binds(program: str, search_path: str | None) -> list[Bind]:
    """A script's interpreter read-only when it lives outside the system dirs (a node from nvm or
    a tarball): its install tree (the folder above its `bin/`), or the binary alone when that
    tree would be the user's home or one of its parents."""
    try:
        with open(program, "rb") as file:
            first = file.read(SHEBANG_BYTES).split(b"\n", 1)[0]
    except OSError:
        return []
    words = first.removeprefix(b"#!").decode(errors="replace").split()
    if not first.startswith(b"#!") or not words:
        return []
    name = words[0]
    if os.path.basename(name) == "env":  # `env node`, `env -S node --flag`: the first program
        wanted = next((w for w in words[1:] if not w.startswith("-") and "=" not in w), "")
        name = (shutil.which(wanted, path=search_path) or "") if wanted else ""
    if not os.path.isabs(name):
        return []
    binds = []
    for path in dict.fromkeys([os.path.abspath(name), os.path.realpath(name)]):
        if not os.path.exists(path) or _system(path):
            continue
        folder = Path(path).parent
        tree = folder.parent if folder.name == "bin" else folder
        user_home = Path.home()
        broad = tree == user_home or tree in user_home.parents
        target = path if broad else str(tree)
        binds.append(Bind(os.path.realpath(target), target))
    return binds


def python_binds() -> list[Bind]:
    """The interpreter, its virtualenv and agent-run's own package: read-only, for the engine's
    helpers (the demo program, the worker-tools relay)."""
    package_root = str(Path(__file__).resolve().parents[2])
    roots = {sys.base_prefix, sys.prefix, package_root, os.path.dirname(sys.executable)}
    return [Bind(os.path.realpath(root), root) for root in sorted(roots)]


def credential_binds(plan: ExecutionPlan) -> list[Bind]:
    """A native sign-in's credential folder, read-write: the engine refreshes its tokens there
    (a temp file renamed over the credential, a lock beside it), so the folder itself must be
    writable. Every other entry already in it is hidden: a folder under an empty tmpfs, anything
    else under a read-only /dev/null (neither can be changed, removed or replaced), so the
    user's settings, hooks, `config.toml`, history and sessions are not there (SECURITY.md)."""
    auth = plan.runtime_config.auth
    sign_in = sign_in_for(plan.engine)
    if auth is None or sign_in is None or not is_native(auth):
        return []
    folder = str(sign_in.credential_dir(auth))
    binds = [Bind(os.path.realpath(folder), folder, writable=True)]
    try:
        entries = sorted(os.scandir(os.path.realpath(folder)), key=lambda e: e.name)
    except OSError:
        return binds
    for entry in entries:
        if sign_in.refreshes(entry.name) or entry.is_symlink():
            continue  # a link shows only what another mount shows
        target = os.path.join(folder, entry.name)
        if entry.is_dir(follow_symlinks=False):
            binds.append(Bind("", target, tmpfs=True))
        else:
            binds.append(Bind(os.devnull, target))
    return binds


def certificate_binds(env: dict[str, str]) -> list[Bind]:
    paths = [env[name] for name in CERTIFICATE_VARIABLES if env.get(name)]
    return [Bind(os.path.realpath(p), p) for p in paths if os.path.exists(p)]


def resolver_binds(resolv_conf: str = RESOLV_CONF) -> list[Bind]:
    """/etc/resolv.conf's target, read-only, when it is a link out of the system dirs
    (systemd-resolved's /run/systemd/resolve/stub-resolv.conf): else no name resolves inside.
    The file alone: /run also holds the user's agent sockets (ssh, gpg, the session bus)."""
    if not os.path.islink(resolv_conf):
        return []
    target = os.path.realpath(resolv_conf)
    if _system(target) or not os.path.isfile(target):
        return []
    return [Bind(target, target)]


def system_binds() -> list[Bind]:
    return [Bind(d, d) for d in SYSTEM_DIRS if os.path.exists(d)] + resolver_binds()


def home_masks(binds: list[Bind], home_root: Path) -> list[Bind]:
    """An empty tmpfs over agent-run's home wherever a bind shows it (a workdir or read root of
    `~`, a program tree that contains the home): `state.db`, `api.sock`, `config.toml`, the
    accounts and other agents' folders are not there. The run's own folders in the home are
    deeper binds, mounted again on top (`ordered`)."""
    home = Path(os.path.realpath(home_root))
    # The home and its parents by what they are on disk (device, inode): a bind whose source is
    # one of them, through any symlink, shows the home. A stat per bind, not a realpath.
    folders = {}
    for folder in (home, *home.parents):
        try:
            found = os.stat(folder)
        except OSError:
            continue
        folders[(found.st_dev, found.st_ino)] = folder
    complete = len(folders) == len(home.parents) + 1
    masks = []
    for bind in binds:
        if bind.tmpfs:
            continue
        shown = _shown_folder(bind.source, folders, complete, home)
        if shown is not None:
            masks.append(Bind("", str(Path(bind.target) / home.relative_to(shown)), tmpfs=True))
    return masks


def _shown_folder(
    source: str, folders: dict[tuple[int, int], Path], complete: bool, home: Path
) -> Path | None:
    """The home, or the parent of it, that `source` is; None when it is neither. By (device,
    inode) when both sides can be stat'ed, else by the resolved path."""
    try:
        found = os.stat(source)
    except OSError:
        found = None
    if found is not None:
        shown = folders.get((found.st_dev, found.st_ino))
        if shown is not None or complete:
            return shown
    real = Path(os.path.realpath(source))
    return real if real == home or real in home.parents else None


def sandbox_binds(
    plan: ExecutionPlan, argv0: str, env: dict[str, str], sandbox_dir: Path, home_root: Path
) -> list[Bind]:
    """Everything one execution's engine sees, besides /proc, /dev and a private /tmp."""
    binds = system_binds() + python_binds() + program_binds(argv0, env.get("PATH"))
    binds += certificate_binds(env)
    writable = plan.profile == "write"
    for root in plan.read_roots:
        binds += [Bind(root, root), *git_binds(root, False)]
    binds += [Bind(plan.workdir, plan.workdir, writable), *git_binds(plan.workdir, writable)]
    binds.append(Bind(plan.engine_home, plan.engine_home, writable=True))
    binds.append(Bind(str(sandbox_dir), str(sandbox_dir), writable=True))
    binds += credential_binds(plan)
    return ordered(binds + home_masks(binds, home_root))


def ordered(binds: list[Bind]) -> list[Bind]:
    """Parents before children (a later mount inside an earlier one is what the engine sees),
    a tmpfs after a bind at the same depth (a mask over what the bind shows), each mount once."""
    unique = list(dict.fromkeys(binds))
    return sorted(unique, key=lambda b: (len(Path(b.target).parts), b.tmpfs))


def bwrap_path() -> str:
    """bubblewrap as this process finds it: the probe and every sandbox use the same one."""
    return shutil.which(BWRAP) or BWRAP


def bwrap_argv(
    binds: list[Bind],
    command: list[str],
    cwd: str,
    bwrap: str = BWRAP,
    setenv: dict[str, str] | None = None,
) -> list[str]:
    inside = str(os.getuid() or UNPRIVILEGED_UID)
    argv = [bwrap, *NAMESPACES, *LIFETIME, "--uid", inside, "--gid", inside, "--cap-drop", "ALL"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--tmpfs", PRIVATE_TMP]
    for bind in binds:
        if bind.tmpfs:
            argv += ["--tmpfs", bind.target]
        else:
            argv += ["--bind" if bind.writable else "--ro-bind", bind.source, bind.target]
    # The daemon's TMPDIR (a folder under ~, /var/tmp/...) is not mounted: the private /tmp is.
    for name, value in ({"TMPDIR": PRIVATE_TMP} | (setenv or {})).items():
        argv += ["--setenv", name, value]
    return [*argv, "--chdir", cwd, "--", *command]


def sandbox_argv(
    plan: ExecutionPlan,
    command: list[str],
    env: dict[str, str],
    sandbox_dir: Path,
    home_root: Path,
) -> list[str]:
    """The engine's command wrapped in its sandbox (`home_root`: agent-run's home, masked)."""
    binds = sandbox_binds(plan, command[0], env, sandbox_dir, home_root)
    return bwrap_argv(binds, command, plan.workdir, bwrap_path())


def command_argv(command: str, workdir: str, home_root: Path) -> list[str]:
    """A shell command agent-run runs on an agent's behalf (verify_command): the workdir
    read-write, the system read-only, nothing of agent-run's home nor of the user's (its
    `HOME` is the sandbox's private /tmp)."""
    binds = system_binds() + [Bind(workdir, workdir, writable=True), *git_binds(workdir, True)]
    argv = ["/bin/sh", "-c", command]
    masked = ordered(binds + home_masks(binds, home_root))
    return bwrap_argv(masked, argv, workdir, bwrap_path(), {"HOME": COMMAND_HOME})


def bwrap_missing() -> str | None:
    """Why no sandbox can start here that a lookup on PATH tells, or None."""
    if shutil.which(BWRAP) is None:
        return "bubblewrap (`bwrap`) is not installed: apt-get install bubblewrap"
    return None


def sandbox_refusal() -> str | None:
    """Why no sandbox can start here (no bwrap, no user namespaces), or None: starts one."""
    missing = bwrap_missing()
    if missing is not None:
        return missing
    probe = bwrap_argv(system_binds(), ["true"], "/", bwrap_path())
    try:
        done = subprocess.run(
            probe,
            capture_output=True,
            text=True,
            errors="replace",  # bytes that are not UTF-8 show as U+FFFD
            timeout=PROBE_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start a sandbox: {exc}"
    if done.returncode != 0:
        return f"bubblewrap could not start a sandbox: {done.stderr.strip()[-300:]}"
    return None


def refusal_message(refusal: str) -> str:
    return f'{refusal} (or set `sandbox = "none"` on the runtime, giving up the boundary)'


def require_sandbox() -> None:
    refusal = sandbox_refusal()
    if refusal is not None:
        raise SandboxUnavailable(refusal_message(refusal))
