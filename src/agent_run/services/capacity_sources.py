"""Capacity sources asked by `capacity collect`: an external `command` collector and a short-lived
`codex app-server` (`codex_appserver`). A failure is no evidence, with backoff, never an error."""

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_run.config.model import CommandCollectorConfig, Config
from agent_run.domain.capacity import ENGINE_VALIDITY_SECONDS
from agent_run.domain.views import CollectedSource
from agent_run.engines.accounts import options_for_account
from agent_run.engines.options import RuntimeOptions
from agent_run.engines.quota import codex_windows, reset_credits
from agent_run.services.collector_process import Run, run_bounded
from agent_run.store.rosters import Roster
from agent_run.store.samples import Sample
from agent_run.system.home import Home

BACKOFF_FIRST_SECONDS = 60.0
BACKOFF_MAX_SECONDS = 900.0
APPSERVER_DEADLINE_SECONDS = 30.0
APPSERVER_OUTPUT_CAP = 2 * 1024 * 1024


class SourceFailed(Exception):
    """This source gave no evidence this time; the message says why (never a secret). A
    `codex_appserver` session may still have read the engine's model roster."""

    def __init__(self, message: str, roster: "Roster | None" = None) -> None:
        super().__init__(message)
        self.roster = roster


class _Window(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    lane: str = Field(min_length=1, max_length=200)
    window: str = Field(min_length=1, max_length=200)
    remaining_percent: float | None = Field(default=None, ge=0, le=100)
    reset_at: float | None = None
    observed_at: float
    valid_until: float | None = None
    reset_credits: int | None = Field(default=None, ge=0, le=1_000_000)


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


async def _run(
    argv: list[str],
    stdin: bytes,
    env: dict[str, str],
    deadline: float,
    cap: int,
    *,
    keep_input_open: bool = False,
    done: Callable[[bytes], bool] | None = None,
) -> Run:
    """A bounded run (services/collector_process.py); SourceFailed when it could not start or
    its output went over `cap`."""
    try:
        run = await run_bounded(
            argv, stdin, env, deadline, cap, keep_input_open=keep_input_open, done=done
        )
    except OSError as exc:
        raise SourceFailed(f"could not start {argv[0]}: {exc.strerror or exc}") from None
    if run.start_error is not None:
        raise SourceFailed(run.start_error)
    if run.ending == "over_cap":
        raise SourceFailed(f"output over {cap} bytes")
    return run


async def _run_collector(
    argv: list[str], stdin: bytes, env: dict[str, str], deadline: float, cap: int
) -> bytes:
    """The collector's stdout once it exits; SourceFailed on its deadline, more than `cap`
    bytes, or a non-zero exit. What it left running is ended with it."""
    run = await _run(argv, stdin, env, deadline, cap)
    if run.ending == "deadline":
        raise SourceFailed(f"no answer within {deadline:g} s")
    if run.status != 0:
        raise SourceFailed(f"exited with status {run.status}")
    return run.output


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
    out = await _run_collector(
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
            reset_credits=w.reset_credits,
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


def roster_models(result: Any) -> list[str] | None:
    """`model/list`'s result: the `model` slug (else `id`) of every entry; None when unreadable."""
    data = result.get("data") if isinstance(result, dict) else None
    if not isinstance(data, list):
        return None
    found = []
    for entry in data:
        name = entry.get("model") or entry.get("id") if isinstance(entry, dict) else None
        if isinstance(name, str) and 0 < len(name) <= 200 and name not in found:
            found.append(name)
    return found


async def _ask_appserver(
    argv: list[str], requests: list[dict[str, Any]], env: dict[str, str], deadline: float, cap: int
) -> dict[int, dict[str, Any]]:
    """Write `requests` to a `codex app-server` and read its replies by id, keeping its input
    open until every request with an id is answered, the deadline passes or it exits: the real
    app-server exits at end of input before answering what is still in flight. Then it (and
    anything it started) is ended. What it answered in time, by id."""
    wanted = {r["id"] for r in requests if "id" in r}
    replies: dict[int, dict[str, Any]] = {}
    pending = bytearray()

    def answered(chunk: bytes) -> bool:
        pending.extend(chunk)
        *lines, rest = bytes(pending).split(b"\n")
        pending[:] = rest
        for line in lines:
            message = _message(line)
            if message is not None and message.get("id") in wanted:
                replies[message["id"]] = message
        return wanted <= replies.keys()

    stdin = b"".join(json.dumps(r).encode() + b"\n" for r in requests)
    await _run(argv, stdin, env, deadline, cap, keep_input_open=True, done=answered)
    return replies


def _message(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


APPSERVER_REQUESTS: list[dict[str, Any]] = [
    {
        "id": 1,
        "method": "initialize",
        "params": {"clientInfo": {"name": "agent-run", "version": "1"}},
    },
    {"method": "initialized"},
    {"id": 2, "method": "account/rateLimits/read"},
    {"id": 3, "method": "model/list", "params": {"includeHidden": True, "limit": 1000}},
]


async def appserver_samples(
    runtime: str, options: RuntimeOptions, account: str | None, now: float
) -> tuple[list[Sample], Roster | None]:
    """A short-lived `codex app-server` with the account's CODEX_HOME: initialize, then
    `account/rateLimits/read` and `model/list` (the roster cache). `options` carry the account's
    own auth. A roster it cannot read is None, never a failure; a rate-limit read that fails
    raises SourceFailed carrying the roster it did read."""
    home = _appserver_home(options)
    env = {**collector_environment(), "CODEX_HOME": str(home)}
    replies = await _ask_appserver(
        [options.binary or "codex", "app-server"],
        APPSERVER_REQUESTS,
        env,
        APPSERVER_DEADLINE_SECONDS,
        APPSERVER_OUTPUT_CAP,
    )
    listed = roster_models(replies.get(3, {}).get("result"))
    roster = Roster(runtime, listed, now, "codex_appserver") if listed else None
    message = replies.get(2)
    if message is None:
        raise SourceFailed(
            "the app-server gave no answer to account/rateLimits/read within "
            f"{APPSERVER_DEADLINE_SECONDS:g} s",
            roster,
        )
    if "error" in message:
        error = message["error"] if isinstance(message["error"], dict) else {}
        raise SourceFailed(
            f"account/rateLimits/read refused: {str(error.get('message'))[:200]}", roster
        )
    result = message.get("result")
    credits = reset_credits(
        result.get("rateLimitResetCredits") if isinstance(result, dict) else None
    )
    samples = [
        Sample(
            runtime,
            account,
            lane,
            window,
            remaining,
            reset,
            now,
            now + ENGINE_VALIDITY_SECONDS,
            "codex_appserver",
            reset_credits=credits,
        )
        for lane, window, remaining, reset in appserver_windows(result)
    ]
    return samples, roster


def measured_accounts(options: RuntimeOptions) -> list[str | None]:
    """The accounts a runtime's source reads: the runtime's own auth (None) when it has one or no
    account is configured and no default account replaces it, then every labelled account."""
    own: list[str | None] = (
        [None]
        if options.default_account is None and (options.auth is not None or not options.accounts)
        else []
    )
    return own + sorted(options.accounts)


@dataclass
class Collected:
    """What one source gave: its outcome, its samples and the engine's model roster, if any."""

    outcome: CollectedSource
    samples: list[Sample]
    roster: Roster | None = None


async def _collect_one(
    config: Config,
    home: Home,
    runtime: str,
    options: RuntimeOptions,
    account: str | None,
    now: float,
) -> Collected:
    source = options.limits_source
    key = (str(home.root), runtime, account, source)
    state = _BACKOFF.setdefault(key, Backoff())
    failed = CollectedSource(runtime=runtime, account=account, source=source, windows=0)
    if now < state.next_attempt_at:
        return Collected(
            failed.model_copy(
                update={
                    "error": "backing off after a failure",
                    "next_attempt_at": state.next_attempt_at,
                }
            ),
            [],
        )
    try:
        samples, roster = await _ask(config, home, runtime, options, account, now)
    except Exception as exc:  # any fault of one source is its own: the others' evidence stays
        reason = (
            str(exc) if isinstance(exc, SourceFailed) else f"unexpected {type(exc).__name__}: {exc}"
        )
        state.failures += 1
        state.next_attempt_at = now + backoff_delay(state.failures)
        roster = exc.roster if isinstance(exc, SourceFailed) else None
        outcome = failed.model_copy(
            update={
                "error": reason[:500],
                "next_attempt_at": state.next_attempt_at,
                "models": len(roster.models) if roster else None,
            }
        )
        return Collected(outcome, [], roster)
    state.failures, state.next_attempt_at = 0, 0.0
    outcome = failed.model_copy(
        update={"windows": len(samples), "models": len(roster.models) if roster else None}
    )
    return Collected(outcome, samples, roster)


async def _ask(
    config: Config,
    home: Home,
    runtime: str,
    options: RuntimeOptions,
    account: str | None,
    now: float,
) -> tuple[list[Sample], Roster | None]:
    if options.limits_source == "command":
        assert config.capacity.command is not None  # config refuses command without a collector
        return await command_samples(config.capacity.command, runtime, options, account, now), None
    own = options_for_account(options, runtime, account, home.root)
    return await appserver_samples(runtime, own, account, now)


async def collect_all(
    config: Config,
    home: Home,
    now: float,
    store: Callable[[Collected], Awaitable[None]] | None = None,
) -> list[Collected]:
    """Every account of every enabled runtime whose source can be asked (`command`,
    `codex_appserver`), concurrently, each handed to `store` as soon as it answers; `native`
    readings arrive with the runs themselves."""
    asked = [
        (name, options, account)
        for name, options in sorted(config.runtimes.items())
        if options.enabled and options.limits_source in ("command", "codex_appserver")
        for account in measured_accounts(options)
    ]

    async def one(name: str, options: RuntimeOptions, account: str | None) -> Collected:
        found = await _collect_one(config, home, name, options, account, now)
        if store is not None and (found.samples or found.roster):
            await store(found)
        return found

    return list(await asyncio.gather(*(one(*entry) for entry in asked)))
