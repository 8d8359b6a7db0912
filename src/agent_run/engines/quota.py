"""Quota windows the engines report themselves: Codex rate limits and Claude Code's
`rate_limit_event`, parsed into `QuotaWindow`s (docs/capacity.md, "native")."""

import re
from dataclasses import dataclass, replace
from typing import Any

DEFAULT_LANE = "default"  # the account-wide lane (domain/capacity.ACCOUNT_LANE)
CODEX_MAIN_LIMIT = "codex"  # Codex's own limitId for its account-wide limit: read as DEFAULT_LANE

# Claude Code's rateLimitType -> (lane, window); a type not listed is read by `_claude_type`.
_CLAUDE_TYPES = {
    "five_hour": (DEFAULT_LANE, "5h"),
    "seven_day": (DEFAULT_LANE, "7d"),
    "seven_day_opus": ("opus", "7d"),
    "seven_day_sonnet": ("sonnet", "7d"),
    "seven_day_overage_included": ("overage_included", "7d"),
}


@dataclass(frozen=True)
class QuotaWindow:
    lane: str
    window: str
    remaining_percent: float | None
    reset_at: float | None
    reset_credits: int | None = None  # resets the account can still redeem, when it said


@dataclass(frozen=True)
class QuotaEvent:
    """An engine reported its account's quota windows (normalized event)."""

    windows: tuple[QuotaWindow, ...]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _percent(value: float | None) -> float | None:
    return None if value is None else max(0.0, min(100.0, value))


def window_name(minutes: float | None, fallback: str) -> str:
    """300 -> "5h", 10080 -> "7d", 45 -> "45m"; unknown -> `fallback`."""
    if minutes is None or minutes <= 0:
        return fallback
    whole = int(minutes)
    if whole % 1440 == 0:
        return f"{whole // 1440}d"
    if whole % 60 == 0:
        return f"{whole // 60}h"
    return f"{whole}m"


def _codex_window(entry: Any, fallback: str, lane: str) -> QuotaWindow | None:
    if not isinstance(entry, dict):
        return None
    used = _number(entry.get("usedPercent", entry.get("used_percent")))
    minutes = _number(entry.get("windowDurationMins", entry.get("window_minutes")))
    reset = _number(entry.get("resetsAt", entry.get("resets_at")))
    if used is None:
        return None  # a bad window is skipped
    return QuotaWindow(lane, window_name(minutes, fallback), _percent(100.0 - used), reset)


def reset_credits(summary: Any) -> int | None:
    """Codex's `rateLimitResetCredits` (`{"availableCount": n, ...}`): the rate-limit resets the
    account can still redeem; None when absent or not a whole number >= 0."""
    count = summary.get("availableCount") if isinstance(summary, dict) else None
    if isinstance(count, bool) or not isinstance(count, (int, float)):
        return None
    return int(count) if count >= 0 and float(count).is_integer() else None


def with_credits(windows: tuple[QuotaWindow, ...], credits: int | None) -> tuple[QuotaWindow, ...]:
    """The windows of one account's reading, each carrying the account's reset credits."""
    if credits is None:
        return windows
    return tuple(replace(window, reset_credits=credits) for window in windows)


def codex_windows(rate_limits: Any) -> tuple[QuotaWindow, ...]:
    """Codex `rateLimits` (app-server, camelCase) or `token_count.rate_limits` (snake_case):
    primary and secondary windows of the lane `limitId`. The account-wide limit (`limitId`
    `codex`, or none: the legacy shape) is the `default` lane; any other limit id (a
    model-specific limit) is a lane of that name."""
    if not isinstance(rate_limits, dict):
        return ()
    lane = rate_limits.get("limitId") or rate_limits.get("limit_id") or DEFAULT_LANE
    lane = lane if isinstance(lane, str) and lane != CODEX_MAIN_LIMIT else DEFAULT_LANE
    found = (_codex_window(rate_limits.get(name), name, lane) for name in ("primary", "secondary"))
    return tuple(window for window in found if window is not None)


_CLAUDE_PERIODS = {"five_hour": "5h", "seven_day": "7d"}
_CLAUDE_TYPE_NAME = re.compile(r"^[a-z0-9_]{1,64}$")


def _claude_type(rate_type: Any) -> tuple[str, str] | None:
    """(lane, window) of a rateLimitType. A type the table does not list is a lane of its own,
    never dropped (a rejection on it must still read 0 %): `seven_day_X` -> lane X window 7d,
    `five_hour_X` -> lane X window 5h, any other name -> lane NAME window `period`. Not a type
    name (not 1-64 of a-z, 0-9, `_`): None."""
    if not isinstance(rate_type, str) or not _CLAUDE_TYPE_NAME.match(rate_type):
        return None
    if rate_type in _CLAUDE_TYPES:
        return _CLAUDE_TYPES[rate_type]
    for prefix, window in _CLAUDE_PERIODS.items():
        if rate_type.startswith(prefix + "_"):
            return rate_type.removeprefix(prefix + "_"), window
    return rate_type, "period"


def _claude_window(
    rate_type: Any, utilization: Any, resets_at: Any, status: Any
) -> QuotaWindow | None:
    kind = _claude_type(rate_type)
    if kind is None:
        return None
    lane, window = kind
    used = _number(utilization)
    remaining = (
        None if used is None else _percent(100.0 - used * 100.0)
    )  # utilization is a fraction
    if status == "rejected":
        remaining = 0.0
    return QuotaWindow(lane, window, remaining, _number(resets_at))


def claude_windows(info: Any) -> tuple[QuotaWindow, ...]:
    """Claude Code `rate_limit_info`: the window it names (`rateLimitType`, `utilization` a
    fraction, `resetsAt`, `status`), and every window of the older `unifiedWindows` shape."""
    if not isinstance(info, dict):
        return ()
    windows: dict[tuple[str, str], QuotaWindow] = {}
    unified = info.get("unifiedWindows")
    if isinstance(unified, dict):
        for rate_type, entry in unified.items():
            if isinstance(entry, dict):
                window = _claude_window(
                    rate_type, entry.get("utilization"), entry.get("resetsAt"), entry.get("status")
                )
                if window is not None:
                    windows[(window.lane, window.window)] = window
    named = _claude_window(
        info.get("rateLimitType"), info.get("utilization"), info.get("resetsAt"), info.get("status")
    )
    if named is not None and (
        named.remaining_percent is not None or (named.lane, named.window) not in windows
    ):
        windows[(named.lane, named.window)] = named
    return tuple(windows.values())


# Anthropic's unified (subscription) windows as response headers: claim -> (lane, window).
_UNIFIED_CLAIMS = {
    "5h": (DEFAULT_LANE, "5h"),
    "7d": (DEFAULT_LANE, "7d"),
    "7d_opus": ("opus", "7d"),
    "7d_sonnet": ("sonnet", "7d"),
}
_UNIFIED_PREFIX = "anthropic-ratelimit-unified-"


def header_windows(headers: dict[str, str]) -> tuple[QuotaWindow, ...]:
    """Quota windows in a provider response's headers, as the credential broker sees them:
    `anthropic-ratelimit-unified-{5h,7d,...}-utilization` (a fraction) and `-reset` (epoch
    seconds). Per-minute rate limits (`x-ratelimit-*`, `anthropic-ratelimit-requests-*`) are not
    quota windows: they stay provider signals."""
    lowered = {key.lower(): value for key, value in headers.items()}
    windows = []
    for claim, (lane, window) in _UNIFIED_CLAIMS.items():
        raw = lowered.get(f"{_UNIFIED_PREFIX}{claim}-utilization")
        if raw is None:
            continue
        try:
            used = float(raw)
            reset_raw = lowered.get(f"{_UNIFIED_PREFIX}{claim}-reset")
            reset = float(reset_raw) if reset_raw is not None else None
        except ValueError:
            continue  # a bad window is skipped
        if used != used or used in (float("inf"), float("-inf")):
            continue
        windows.append(QuotaWindow(lane, window, _percent(100.0 - used * 100.0), reset))
    return tuple(windows)
