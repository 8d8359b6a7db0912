"""Capacity sources asked by `capacity collect`: an external `command` collector and a short-lived
`codex app-server` (`codex_appserver`). A failure is no evidence, with backoff, never an error."""

import asyncio
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_run.config import CommandCollectorConfig, Config
from agent_run.domain.capacity import ENGINE_VALIDITY_SECONDS
from agent_run.domain.views import CollectedSource
from agent_run.engines.options import RuntimeOptions
from agent_run.engines.quota import codex_windows
from agent_run.home import Home
from agent_run.store.samples import Sample

BACKOFF_FIRST_SECONDS = 60.0
BACKOFF_MAX_SECONDS = 900.0
APPSERVER_DEADLINE_SECONDS = 30.0
APPSERVER_OUTPUT_CAP = 2 * 1024 * 1024


class SourceFailed(Exception):
    """This source gave no evidence this time; the message says why (never a secret)."""


class _Window(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    lane: str = Field(min_length=1, max_length=200)
    window: str = Field(min_length=1, max_length=200)
    remaining_percent: float | None = Field(default=None, ge=0, le=100)
    reset_at: float | None = None
    observed_at: float
    valid_until: float | None = None


class _CollectorOutput(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    version: int = Field(ge=1, le=1)
    windows: list[_Window] = Field(max_length=10_000)


@dataclass
class Backoff:
    failures: int = 0
    next_attempt_at: float = 0.0


# (home, runtime, account, source) -> backoff; lives as long as the daemon.
_BACKOFF: dict[tuple[str, str, str | None, str], Backoff] = {}

# A collector gets these of the daemon's variables and no others (no provider key reaches it).
_COLLECTOR_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
)


def collector_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in _COLLECTOR_ENV if name in os.environ}


def backoff_delay(failures: int) -> float:
    """60 s after the first failure, doubling, at most 900 s."""
    return float(min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2 ** max(0, failures - 1)))


async def _run_bounded(
    argv: list[str], stdin: bytes, env: dict[str, str] | None, deadline: float, cap: int
) -> bytes:
    """The program's stdout; SourceFailed on a deadline, more than `cap` bytes, or a non-zero exit.
    The program runs in its own process group, killed whole when it overstays."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise SourceFailed(f"could not start {argv[0]}: {exc.strerror or exc}") from None

    async def read_all() -> bytes:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(stdin)
        await proc.stdin.drain()
        proc.stdin.close()
        out = b""
        while chunk := await proc.stdout.read(65536):
            out += chunk
            if len(out) > cap:
                raise SourceFailed(f"output over {cap} bytes")
        await proc.wait()
        return out

    try:
        out = await asyncio.wait_for(read_all(), deadline)
    except (SourceFailed, TimeoutError, BrokenPipeError, ConnectionResetError) as exc:
        _kill_group(proc.pid)
        await proc.communicate()  # drain what the dead group left in the pipe: wait() needs EOF
        raise SourceFailed(
            str(exc)
            if isinstance(exc, SourceFailed)
            else f"no answer within {deadline:g} s"
            if isinstance(exc, TimeoutError)
            else "the collector closed its input"
        ) from None
    if proc.returncode != 0:
        raise SourceFailed(f"exited with status {proc.returncode}")
    return out


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def command_samples(
    collector: CommandCollectorConfig,
    runtime: str,
    options: RuntimeOptions,
    account: str | None,
    now: float,
) -> list[Sample]:
    """Run the external collector once: stdin one JSON request, stdout `{version: 1, windows}`."""
    request = {
        "version": 1,
        "runtime": runtime,
        "account": account,
        "models": options.models,
        "now": now,
    }
    out = await _run_bounded(
        collector.argv,
        json.dumps(request).encode(),
        collector_environment(),
        collector.deadline_seconds,
        collector.output_cap_bytes,
    )
    try:
        parsed = _CollectorOutput.model_validate_json(out)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "output"
        raise SourceFailed(f"invalid collector output at `{where}`: {first['msg']}") from None
    return [
        Sample(
            runtime,
            account,
            w.lane,
            w.window,
            w.remaining_percent,
            w.reset_at,
            w.observed_at,
            w.valid_until if w.valid_until is not None else w.observed_at + collector.valid_seconds,
            "command",
        )
        for w in parsed.windows
    ]


def _appserver_home(options: RuntimeOptions) -> Path:
    auth = options.auth
    if auth is None or auth.login is None:
        raise SourceFailed(
            "codex_appserver needs a sign-in (auth.login): the app-server refuses API keys"
        )
    return Path(auth.dir).expanduser() if auth.dir else Path.home() / ".codex"


def appserver_windows(result: Any) -> list[tuple[str, str, float | None, float | None]]:
    """`account/rateLimits/read`'s result: every lane of `rateLimitsByLimitId`, else the legacy
    `rateLimits`; a bad window is skipped."""
    if not isinstance(result, dict):
        return []
    by_id = result.get("rateLimitsByLimitId")
    lanes = (
        list(by_id.items())
        if isinstance(by_id, dict) and by_id
        else [(None, result.get("rateLimits"))]
    )
    found = []
    for limit_id, limits in lanes:
        if isinstance(limits, dict) and limit_id and not limits.get("limitId"):
            limits = {**limits, "limitId": limit_id}
        found += [
            (w.lane, w.window, w.remaining_percent, w.reset_at) for w in codex_windows(limits)
        ]
    return found


async def appserver_samples(runtime: str, options: RuntimeOptions, now: float) -> list[Sample]:
    """A short-lived `codex app-server` with the account's CODEX_HOME: initialize, then
    `account/rateLimits/read`, then close its input."""
    home = _appserver_home(options)
    lines = [
        {
            "id": 1,
            "method": "initialize",
            "params": {"clientInfo": {"name": "agent-run", "version": "1"}},
        },
        {"method": "initialized"},
        {"id": 2, "method": "account/rateLimits/read"},
    ]
    stdin = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    env = {**collector_environment(), "CODEX_HOME": str(home)}
    out = await _run_bounded(
        [options.binary or "codex", "app-server"],
        stdin,
        env,
        APPSERVER_DEADLINE_SECONDS,
        APPSERVER_OUTPUT_CAP,
    )
    for raw in out.splitlines():
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("id") == 2:
            if "error" in message:
                error = message["error"] if isinstance(message["error"], dict) else {}
                raise SourceFailed(
                    f"account/rateLimits/read refused: {str(error.get('message'))[:200]}"
                )
            return [
                Sample(
                    runtime,
                    None,
                    lane,
                    window,
                    remaining,
                    reset,
                    now,
                    now + ENGINE_VALIDITY_SECONDS,
                    "codex_appserver",
                )
                for lane, window, remaining, reset in appserver_windows(message.get("result"))
            ]
    raise SourceFailed("the app-server gave no answer to account/rateLimits/read")


async def _collect_one(
    config: Config, home: Home, runtime: str, options: RuntimeOptions, now: float
) -> tuple[CollectedSource, list[Sample]]:
    source = options.limits_source
    key = (str(home.root), runtime, None, source)
    state = _BACKOFF.setdefault(key, Backoff())
    if now < state.next_attempt_at:
        return CollectedSource(
            runtime=runtime,
            source=source,
            windows=0,
            error="backing off after a failure",
            next_attempt_at=state.next_attempt_at,
        ), []
    try:
        if source == "command":
            assert config.capacity.command is not None  # config refuses command without a collector
            samples = await command_samples(config.capacity.command, runtime, options, None, now)
        else:
            samples = await appserver_samples(runtime, options, now)
    except SourceFailed as exc:
        state.failures += 1
        state.next_attempt_at = now + backoff_delay(state.failures)
        return CollectedSource(
            runtime=runtime,
            source=source,
            windows=0,
            error=str(exc),
            next_attempt_at=state.next_attempt_at,
        ), []
    state.failures, state.next_attempt_at = 0, 0.0
    return CollectedSource(runtime=runtime, source=source, windows=len(samples)), samples


async def collect_all(
    config: Config, home: Home, now: float
) -> tuple[list[CollectedSource], list[Sample]]:
    """Every enabled runtime whose source can be asked (`command`, `codex_appserver`), concurrently;
    `native` readings arrive with the runs themselves."""
    asked = [
        (name, options)
        for name, options in sorted(config.runtimes.items())
        if options.enabled and options.limits_source in ("command", "codex_appserver")
    ]
    results = await asyncio.gather(
        *(_collect_one(config, home, name, options, now) for name, options in asked)
    )
    return [outcome for outcome, _ in results], [s for _, samples in results for s in samples]


def reset_backoff() -> None:
    """Forget every backoff (a new daemon starts with none)."""
    _BACKOFF.clear()
