"""`doctor`, run in the daemon with the daemon's PATH and environment (where agents run): the
config it runs with, each runtime's binary, auth, sign-in, endpoint, engine home and sandbox, and engine
CLIs installed but not configured (with the block that enables them)."""

import asyncio
import functools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomli_w

from agent_run.config.init_file import find_installed
from agent_run.domain.daemon_views import DoctorCheck, DoctorReport
from agent_run.domain.requests import EmptyParams
from agent_run.engines.accounts import account_auth
from agent_run.engines.options import auth_file_too_open
from agent_run.engines.registry import all_engine_specs, engine_spec, sign_in_for
from agent_run.engines.sandbox import sandbox_refusal
from agent_run.engines.signin import SignInMissing, read_credential
from agent_run.services.context import ServiceContext
from agent_run.system.git_merge import git_version, merge_git_refusal

VERSION_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 3.0


def _ok(check: str, detail: str) -> DoctorCheck:
    return DoctorCheck(check=check, level="ok", detail=detail)


def _bad(check: str, detail: str, fix: str | None = None, level: Any = "bad") -> DoctorCheck:
    return DoctorCheck(check=check, level=level, detail=detail, fix=fix)


def config_checks(ctx: ServiceContext) -> list[DoctorCheck]:
    path = ctx.home.config_path
    live = ctx.live
    revision = live.revision if live is not None else "unknown"
    checks = [
        _ok(
            "config",
            f"{path if path.exists() else 'built-in defaults'}: revision {revision}, "
            f"runtimes {', '.join(ctx.config.runtimes)}",
        )
    ]
    if live is not None and live.refused is not None:
        checks.append(
            _bad(
                "config reload",
                f"config.toml revision {live.refused.revision} refused: "
                f"{live.refused.message}; the daemon keeps revision {revision}",
                f"fix `{live.refused.field or 'the file'}` in {path}; it is read again on the next "
                "start, `agent-run api status` or SIGHUP",
            )
        )
    if path.exists() and (mode := path.stat().st_mode & 0o777) & 0o077:
        checks.append(
            _bad(
                "config permissions",
                f"{path} is readable by group or others (mode {mode:o})",
                f"chmod 600 {path}",
                level="warn",
            )
        )
    return checks


def binary_version(path: str) -> str:
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            errors="replace",  # bytes that are not UTF-8 show as U+FFFD
            stdin=subprocess.DEVNULL,
            timeout=VERSION_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"--version failed: {exc}"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else f"--version printed nothing (exit {done.returncode})"


def binary_problem(runtime: Any) -> str | None:
    """Why the runtime's engine CLI cannot be run from this daemon (not on its PATH, not an
    executable file), or None (found, or the engine needs none). `doctor` reports it; capacity
    never ranks such a runtime (docs/capacity.md)."""
    default_binary = engine_spec(runtime.engine).default_binary
    if default_binary is None:
        return None
    binary = runtime.binary or default_binary
    if shutil.which(binary) is not None:
        return None
    if os.path.isabs(binary):
        return (
            f"{binary} not found" if not os.path.exists(binary) else f"{binary} is not executable"
        )
    return f"`{binary}` not found: the daemon's PATH has no `{binary}`"


def binary_check(name: str, runtime: Any) -> DoctorCheck:
    problem = binary_problem(runtime)
    if problem is not None:
        return _bad(
            f"runtime {name}",
            problem,
            f"set `binary` under [runtimes.{name}] to an absolute path, or restart the daemon from "
            f"a shell that has it (`agent-run api restart`)",
        )
    default_binary = engine_spec(runtime.engine).default_binary
    if default_binary is None:
        return _ok(f"runtime {name}", "built in (no CLI of its own)")
    path = shutil.which(runtime.binary or default_binary)
    assert path is not None  # binary_problem found it
    return _ok(f"runtime {name}", f"{path}: {binary_version(path)}")


def auth_check(name: str, engine: str, auth: Any, target: str) -> DoctorCheck | None:
    """One `auth` table (a runtime's, or one of its accounts': `name` is then `RUNTIME/LABEL`)
    as the daemon sees it: the variable set (never its value), the key file readable and
    private, or the native sign-in present; `target` is what `agent-run login` takes to sign it
    in (`RUNTIME`, or `RUNTIME --account LABEL`)."""
    login = f"agent-run login {target}"
    if auth is None:
        return None
    if auth.env:
        if os.environ.get(auth.env):
            return _ok(f"auth {name}", f"{auth.env} is set in the daemon's environment")
        return _bad(
            f"auth {name}",
            f"{auth.env} is not set in the daemon's environment",
            f"export {auth.env} and `agent-run api restart` from that shell, or use "
            f'auth = {{ file = "PATH" }} (a 0600 file) for a launchd/systemd daemon',
        )
    if auth.file:
        return auth_file_check(name, auth.file)
    sign_in = sign_in_for(engine)
    if sign_in is None:  # config refuses a native login for an engine without one
        return _bad(f"sign-in {name}", f"the {engine} engine has no native sign-in")
    try:
        credential = read_credential(sign_in, auth.model_dump(), target)
    except SignInMissing as exc:
        return _bad(f"sign-in {name}", str(exc), login)
    detail = f"{sign_in.credential_path(auth.model_dump())} ({credential.mode})"
    if credential.expires_at is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(credential.expires_at))
        detail += f", access token expires {stamp}" + (
            " (the engine refreshes it)" if credential.expires_at < time.time() else ""
        )
    return _ok(f"sign-in {name}", detail)


def auth_file_check(name: str, file: str) -> DoctorCheck:
    """A key file: there, readable by the daemon, and not by group or others (a run refuses it)."""
    path = Path(file).expanduser()
    if not path.is_file() or not os.access(path, os.R_OK):
        return _bad(
            f"auth {name}", f"{path} is not a readable file", f"write the key to {path} (chmod 600)"
        )
    if auth_file_too_open(file):
        mode = path.stat().st_mode & 0o777
        return _bad(
            f"auth {name}",
            f"{path} is readable by group or others (mode {mode:o}): runs refuse it",
            f"chmod 600 {path}",
        )
    return _ok(f"auth {name}", f"{path} is readable by the daemon only (mode 600 or tighter)")


def auth_checks(home_root: Path, name: str, runtime: Any) -> list[DoctorCheck]:
    """The runtime's own `auth`, then each account's (a run on the account uses its auth)."""
    checks = [auth_check(name, runtime.engine, runtime.auth, name)]
    for label in runtime.accounts:
        auth = account_auth(runtime, name, label, home_root)
        target = f"{name} --account {label}"
        checks.append(auth_check(f"{name}/{label}", runtime.engine, auth, target))
    return [check for check in checks if check is not None]


def endpoint_check(name: str, runtime: Any) -> DoctorCheck | None:
    base_url = getattr(runtime, "base_url", None)
    if not base_url:
        return None
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection(
            (parts.hostname or "", port), timeout=CONNECT_TIMEOUT_SECONDS
        ).close()
    except OSError as exc:
        return _bad(
            f"endpoint {name}",
            f"cannot connect to {parts.hostname}:{port}: {exc}",
            f"check base_url under [runtimes.{name}] and the network",
        )
    return _ok(f"endpoint {name}", f"{parts.hostname}:{port} accepts connections")


def engine_home_check(ctx: ServiceContext, name: str) -> DoctorCheck:
    folder = ctx.home.homes_dir / name
    probe = folder if folder.exists() else ctx.home.homes_dir
    if os.access(probe, os.W_OK | os.X_OK):
        return _ok(f"engine home {name}", f"{folder} is writable")
    return _bad(
        f"engine home {name}", f"{probe} is not writable by the daemon", f"chmod 700 {probe}"
    )


def sandbox_check(name: str, runtime: Any, refusal: Callable[[], str | None]) -> DoctorCheck:
    """Can this daemon start the runtime's sandbox? `sandbox = "none"` is always flagged."""
    check = f"sandbox {name}"
    if runtime.sandbox == "none":
        return _bad(
            check,
            'sandbox = "none": the engine sees everything the user can (SECURITY.md)',
            f'remove `sandbox = "none"` from [runtimes.{name}]',
            level="warn",
        )
    why = refusal()
    if why is None:
        return _ok(check, "bubblewrap starts a sandbox")
    return _bad(check, f"{why}: runs of this runtime are refused", "apt-get install bubblewrap")


def runtime_checks(ctx: ServiceContext) -> list[DoctorCheck]:
    checks: list[DoctorCheck] = []
    refusal = functools.cache(sandbox_refusal)  # one probe for every runtime
    for name, runtime in ctx.config.runtimes.items():
        if not runtime.enabled:
            checks.append(_ok(f"runtime {name}", "disabled"))
            continue
        found = [
            binary_check(name, runtime),
            *auth_checks(ctx.home.root, name, runtime),
            endpoint_check(name, runtime),
            engine_home_check(ctx, name),
            sandbox_check(name, runtime, refusal),
        ]
        checks += [check for check in found if check is not None]
    return checks


def enable_block(name: str, example: dict[str, Any], binary: str) -> str:
    """The exact `[runtimes.NAME]` table that enables an engine found at `binary`."""
    return tomli_w.dumps({"runtimes": {name: {**example, "binary": binary}}}).strip()


def unconfigured_checks(ctx: ServiceContext) -> list[DoctorCheck]:
    configured = {runtime.engine for runtime in ctx.config.runtimes.values()}
    checks = []
    for spec in all_engine_specs():
        if spec.name in configured or not spec.default_binary or not spec.config_example:
            continue
        binary = find_installed(spec.default_binary)
        if binary is not None:
            checks.append(
                _bad(
                    f"unconfigured {spec.name}",
                    f"{binary} is installed but no runtime uses the {spec.name} engine",
                    enable_block(spec.name, dict(spec.config_example), binary)
                    + "\n(append it to config.toml, or run `agent-run init --detect`, which "
                    "appends a block for each engine found)",
                    level="warn",
                )
            )
    return checks


def git_check() -> DoctorCheck:
    """The daemon's git: batches need one, `run_merge` one of 2.38 or later."""
    version = git_version()
    refusal = merge_git_refusal(version)
    if refusal:
        return _bad("git", refusal, "install git 2.38 or later on the daemon's PATH", level="warn")
    return _ok("git", f"git version {version}: batches and run_merge work (run_merge needs 2.38+)")


async def doctor(ctx: ServiceContext, _p: EmptyParams) -> DoctorReport:
    ctx.refresh_config()

    def run_checks() -> list[DoctorCheck]:
        return config_checks(ctx) + [git_check()] + runtime_checks(ctx) + unconfigured_checks(ctx)

    checks = await asyncio.to_thread(run_checks)
    return DoctorReport(
        ok=all(check.level != "bad" for check in checks), pid=os.getpid(), checks=checks
    )
