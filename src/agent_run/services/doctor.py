"""`doctor`, run in the daemon with the daemon's PATH and environment (where agents run): the
config it runs with, each runtime's binary, auth, sign-in, endpoint and engine home, and engine
CLIs installed but not configured (with the block that enables them)."""

import asyncio
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomli_w

from agent_run.domain.daemon_views import DoctorCheck, DoctorReport
from agent_run.domain.requests import EmptyParams
from agent_run.engines.registry import all_engine_specs, engine_spec
from agent_run.engines.signin import SIGN_INS, SignInMissing, read_credential
from agent_run.services.context import ServiceContext

VERSION_TIMEOUT_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 3.0
# Where npm puts global CLIs besides the daemon's PATH (a daemon started by launchd/systemd
# often has a PATH without them).
NPM_PREFIXES = (
    "~/.npm-global/bin",
    "~/.local/bin",
    "/usr/local/bin",
    "/opt/homebrew/bin",
    "~/.volta/bin",
)


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
            stdin=subprocess.DEVNULL,
            timeout=VERSION_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"--version failed: {exc}"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else f"--version printed nothing (exit {done.returncode})"


def binary_check(name: str, runtime: Any) -> DoctorCheck:
    default_binary = engine_spec(runtime.engine).default_binary
    if default_binary is None:
        return _ok(f"runtime {name}", "built in (no CLI of its own)")
    binary = runtime.binary or default_binary
    path = shutil.which(binary)
    if path is None:
        where = (
            f"{binary} not found"
            if os.path.isabs(binary)
            else f"`{binary}` not found: the daemon's PATH has no `{binary}`"
        )
        return _bad(
            f"runtime {name}",
            where,
            f"set `binary` under [runtimes.{name}] to an absolute path, or restart the daemon from "
            f"a shell that has it (`agent-run api restart`)",
        )
    return _ok(f"runtime {name}", f"{path}: {binary_version(path)}")


def auth_check(name: str, runtime: Any) -> DoctorCheck | None:
    auth = runtime.auth
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
        path = Path(auth.file).expanduser()
        if not path.is_file() or not os.access(path, os.R_OK):
            return _bad(
                f"auth {name}",
                f"{path} is not a readable file",
                f"write the key to {path} (chmod 600)",
            )
        return _ok(f"auth {name}", f"{path} is readable by the daemon")
    try:
        credential = read_credential(SIGN_INS[runtime.engine], auth.model_dump(), name)
    except (SignInMissing, KeyError) as exc:
        return _bad(f"sign-in {name}", str(exc), f"agent-run login {name}")
    detail = f"{SIGN_INS[runtime.engine].credential_path(auth.model_dump())} ({credential.mode})"
    if credential.expires_at is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(credential.expires_at))
        detail += f", access token expires {stamp}" + (
            " (the engine refreshes it)" if credential.expires_at < time.time() else ""
        )
    return _ok(f"sign-in {name}", detail)


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


def runtime_checks(ctx: ServiceContext) -> list[DoctorCheck]:
    checks: list[DoctorCheck] = []
    for name, runtime in ctx.config.runtimes.items():
        if not runtime.enabled:
            checks.append(_ok(f"runtime {name}", "disabled"))
            continue
        found = [
            binary_check(name, runtime),
            auth_check(name, runtime),
            endpoint_check(name, runtime),
            engine_home_check(ctx, name),
        ]
        checks += [check for check in found if check is not None]
    return checks


def find_installed(binary: str) -> str | None:
    """A CLI on the daemon's PATH or under a common npm prefix."""
    found = shutil.which(binary)
    if found:
        return found
    for prefix in NPM_PREFIXES:
        candidate = Path(prefix).expanduser() / binary
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


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
                    + "\n(or `agent-run init --detect`)",
                    level="warn",
                )
            )
    return checks


async def doctor(ctx: ServiceContext, _p: EmptyParams) -> DoctorReport:
    ctx.refresh_config()

    def run_checks() -> list[DoctorCheck]:
        return config_checks(ctx) + runtime_checks(ctx) + unconfigured_checks(ctx)

    checks = await asyncio.to_thread(run_checks)
    return DoctorReport(
        ok=all(check.level != "bad" for check in checks), pid=os.getpid(), checks=checks
    )
