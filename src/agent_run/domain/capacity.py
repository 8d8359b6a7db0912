"""Capacity ranking rules, pure: readings of quota windows in, routes ranked for new work out.

The rules are docs/capacity.md's, word for word; `tests/test_capacity_rules.py` holds the
golden cases. Nothing here reads a clock, a file or a database: `now` is a parameter.
"""

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

HIGH_RISK_PERCENT = 10.0
MEDIUM_RISK_PERCENT = 30.0
MIN_BURN_SPAN_HOURS = 1.0
ENGINE_VALIDITY_SECONDS = 900.0  # engine streams and the Codex app-server
CONFLICT_PERCENT = 10.0  # two fresh readings of one pool window further apart than this conflict
CONFLICT_RESET_SECONDS = 60.0  # ... or with resets further apart than this

ACCOUNT_LANE = "default"  # the account-wide lane: every model of the account spends it

Risk = Literal["high", "medium", "low", "unknown"]


@dataclass(frozen=True)
class Reading:
    """One sample of one window, already mapped to the pool it measures."""

    pool: str  # the provider account identity whose quota this is
    lane: str
    window: str
    remaining_percent: float | None
    reset_at: float | None
    observed_at: float
    valid_until: float
    runtime: str = ""
    account: str | None = None
    source: str = "native"

    def fresh(self, now: float) -> bool:
        reset_passed = self.reset_at is not None and self.reset_at <= now
        return self.observed_at <= now <= self.valid_until and not reset_passed


@dataclass(frozen=True)
class RouteSpec:
    """A way to run work: (runtime, account or None for the native sign-in, lane) and its weights.
    It spends the pools (pool, lane) and, for a lane other than the account-wide one,
    (pool, ACCOUNT_LANE) as well."""

    runtime: str
    account: str | None
    lane: str
    pool: str
    runtime_multiplier: float = 1.0
    account_multiplier: float | None = None
    lane_multiplier: float | None = None

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lanes whose windows this route spends: its own and the account-wide one."""
        return (self.lane,) if self.lane == ACCOUNT_LANE else (self.lane, ACCOUNT_LANE)

    @property
    def own_weight(self) -> float:
        """Account override > lane override > runtime multiplier."""
        if self.account_multiplier is not None:
            return self.account_multiplier
        if self.lane_multiplier is not None:
            return self.lane_multiplier
        return self.runtime_multiplier


@dataclass(frozen=True)
class WindowState:
    """What the rules make of one window of a pool at `now`."""

    window: str
    latest: Reading
    fresh: bool
    burn_per_hour: float | None
    span_hours: float
    slack: float | None

    @property
    def remaining(self) -> float | None:
        return self.latest.remaining_percent


@dataclass(frozen=True)
class RankedRoute:
    runtime: str
    account: str | None
    lane: str
    pool: str
    limiting_window: str
    remaining_percent: float
    reset_at: float | None
    slack: float
    score: float
    weight: float
    priority: float
    limiting_lane: str = ACCOUNT_LANE
    lowest_remaining_percent: float = 0.0  # the least left in any window the route spends


@dataclass(frozen=True)
class SetAside:
    runtime: str
    account: str | None
    lane: str
    reason: str
    pool: str = ""


@dataclass(frozen=True)
class CapacityOrder:
    observed_at: float
    routes: list[RankedRoute] = field(default_factory=list)
    omitted: list[SetAside] = field(default_factory=list)
    deferred: list[SetAside] = field(default_factory=list)
    unavailable_runtimes: list[str] = field(default_factory=list)
    insufficient_diversity: bool = True


def clamp(value: float, low: float = -1.0, high: float = 1.0) -> float:
    return max(low, min(high, value))


def burn_rate(history: Sequence[Reading]) -> tuple[float | None, float]:
    """(% dropped per hour, span in hours) over the samples sharing the latest one's reset.

    `history` is one window's readings, oldest first. Fewer than two such samples with a
    remaining value, or no time between them: burn unknown. A rise counts as zero burn."""
    if not history:
        return None, 0.0
    latest_reset = history[-1].reset_at
    same = [r for r in history if r.reset_at == latest_reset and r.remaining_percent is not None]
    if len(same) < 2:
        return None, 0.0
    span_hours = (same[-1].observed_at - same[0].observed_at) / 3600.0
    if span_hours <= 0:
        return None, 0.0
    first, last = same[0].remaining_percent, same[-1].remaining_percent
    assert first is not None and last is not None
    return max(0.0, (first - last) / span_hours), span_hours


def window_slack(
    remaining: float, reset_at: float | None, burn: float | None, span_hours: float, now: float
) -> float:
    """With burn known over >= 1 h and a reset ahead: projected remaining at the reset / 100;
    else 2 * remaining / 100 - 1; both clamped to [-1, 1]."""
    if burn is not None and span_hours >= MIN_BURN_SPAN_HOURS and reset_at is not None:
        hours_to_reset = max(0.0, (reset_at - now) / 3600.0)
        return clamp((remaining - burn * hours_to_reset) / 100.0)
    return clamp(2.0 * remaining / 100.0 - 1.0)


def window_state(history: Sequence[Reading], now: float) -> WindowState:
    """One window's readings (oldest first, non-empty) judged at `now`."""
    latest = history[-1]
    fresh = latest.fresh(now) and latest.remaining_percent is not None
    burn, span = burn_rate([r for r in history if r.observed_at <= now])
    slack = None
    if fresh and latest.remaining_percent is not None:
        slack = window_slack(latest.remaining_percent, latest.reset_at, burn, span, now)
    return WindowState(latest.window, latest, fresh, burn, span, slack)


def risk(state: WindowState, now: float) -> Risk:
    """high <= 10 % left, medium <= 30 %, else by burn against the sustainable rate (what is left
    spread evenly until the reset): above it high, above half of it medium, else low; stale unknown."""
    remaining = state.remaining
    if not state.fresh or remaining is None:
        return "unknown"
    if remaining <= HIGH_RISK_PERCENT:
        return "high"
    if remaining <= MEDIUM_RISK_PERCENT:
        return "medium"
    reset_at = state.latest.reset_at
    if state.burn_per_hour is None or reset_at is None or reset_at <= now:
        return "low"
    sustainable = remaining / ((reset_at - now) / 3600.0)
    if state.burn_per_hour > sustainable:
        return "high"
    if state.burn_per_hour > sustainable / 2.0:
        return "medium"
    return "low"


def _group(readings: Iterable[Reading]) -> dict[tuple[str, str], dict[str, list[Reading]]]:
    """pool, lane -> window -> readings oldest first."""
    grouped: dict[tuple[str, str], dict[str, list[Reading]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for reading in sorted(readings, key=lambda r: r.observed_at):
        grouped[(reading.pool, reading.lane)][reading.window].append(reading)
    return grouped


def _route_windows(
    spec: RouteSpec, grouped: dict[tuple[str, str], dict[str, list[Reading]]]
) -> dict[tuple[str, str], list[Reading]]:
    """(lane, window) -> readings of every window the route spends: its lane's and, for a
    model-specific lane, the account-wide lane's (as far as either was ever read)."""
    return {
        (lane, window): history
        for lane in spec.lanes
        for window, history in grouped.get((spec.pool, lane), {}).items()
    }


def _named(spec: RouteSpec, lane: str, window: str) -> str:
    """A window as reasons name it: `5h` in the route's own lane, `default/5h` in another."""
    return window if lane == spec.lane else f"{lane}/{window}"


def model_lane(model: str, lanes: Iterable[str], configured: str | None = None) -> str:
    """The lane a model spends besides the account-wide one, among the lanes read for its
    account: the configured one (`model_lanes`), else the first (by name) whose name is a word
    of the model's name (`claude-sonnet-4-5` -> `sonnet`), else ACCOUNT_LANE. A lane never read
    is no constraint anyone knows of: the route then spends the account-wide lane only."""
    seen = set(lanes) - {ACCOUNT_LANE}
    if configured is not None and configured in seen:
        return configured
    words = set(re.split(r"[^a-z0-9]+", model.lower()))
    return next((lane for lane in sorted(seen) if lane.lower() in words), ACCOUNT_LANE)


def _conflicting(history: Sequence[Reading], now: float) -> bool:
    """Fresh latest readings of one window from different runtimes/sources that disagree: resets
    more than CONFLICT_RESET_SECONDS apart, or remaining further apart than CONFLICT_PERCENT."""
    latest: dict[tuple[str, str], Reading] = {}
    for reading in history:
        if reading.fresh(now) and reading.remaining_percent is not None:
            latest[(reading.runtime, reading.source)] = reading
    values = list(latest.values())
    for other in values[1:]:
        first = values[0]
        assert first.remaining_percent is not None and other.remaining_percent is not None
        if (other.reset_at is None) != (first.reset_at is None):
            return True
        if (
            other.reset_at is not None
            and first.reset_at is not None
            and abs(other.reset_at - first.reset_at) > CONFLICT_RESET_SECONDS
        ):
            return True
        if abs(other.remaining_percent - first.remaining_percent) > CONFLICT_PERCENT:
            return True
    return False


def _judge_route(
    spec: RouteSpec, windows: dict[tuple[str, str], list[Reading]], now: float
) -> tuple[str, tuple[str, WindowState] | None, str]:
    """("rank" | "omit" | "defer", the limiting (lane, window), reason)."""
    if not any(lane == spec.lane for lane, _ in windows):
        return "defer", None, f"no reading for lane {spec.lane}"
    states = [(key, window_state(history, now)) for key, history in sorted(windows.items())]
    for (lane, window), state in states:
        reset = state.latest.reset_at
        if state.remaining == 0 and (reset is None or reset > now):
            name = _named(spec, lane, window)
            return "omit", (lane, state), f"window {name} is exhausted (0 % left)"
    for (lane, window), history in sorted(windows.items()):
        if _conflicting(history, now):
            return "defer", None, f"window {_named(spec, lane, window)}: readings conflict"
    stale = [_named(spec, lane, window) for (lane, window), s in states if not s.fresh]
    if stale:
        return "defer", None, f"no fresh reading for window {', '.join(stale)}"
    (lane, _window), limiting = min(
        states,
        key=lambda item: (
            item[1].slack if item[1].slack is not None else 2.0,
            item[0][0] != spec.lane,  # a tie goes to the route's own lane
            item[0],
        ),
    )
    return "rank", (lane, limiting), ""


def _pool_weights(specs: Sequence[RouteSpec]) -> dict[tuple[str, str], float]:
    """Routes sharing a pool (aliases) take the largest weight among them, never the sum."""
    weights: dict[tuple[str, str], float] = {}
    for spec in specs:
        key = (spec.pool, spec.lane)
        weights[key] = max(weights.get(key, 0.0), spec.own_weight)
    return weights


def capacity_order(
    specs: Sequence[RouteSpec], readings: Iterable[Reading], now: float
) -> CapacityOrder:
    """Routes ranked for new work: priority, then score, then lowest remaining, then earliest reset."""
    grouped = _group(readings)
    seen_pools = {pool for pool, _lane in grouped}
    weights = _pool_weights(specs)
    ranked: list[RankedRoute] = []
    omitted: list[SetAside] = []
    deferred: list[SetAside] = []
    # a runtime none of whose pools has any reading, fresh or stale, is unavailable
    with_evidence = {s.runtime for s in specs if s.pool in seen_pools}
    unavailable = sorted({s.runtime for s in specs} - with_evidence)
    for spec in specs:
        if spec.runtime in unavailable:
            continue
        windows = _route_windows(spec, grouped)
        verdict, found, reason = _judge_route(spec, windows, now)
        aside = SetAside(spec.runtime, spec.account, spec.lane, reason, spec.pool)
        if verdict == "omit":
            omitted.append(aside)
            continue
        if verdict == "defer" or found is None:
            deferred.append(aside)
            continue
        lane, limiting = found
        assert limiting.slack is not None and limiting.remaining is not None  # fresh, known
        score = 1.0 + limiting.slack
        weight = weights[(spec.pool, spec.lane)]
        lowest = min(h[-1].remaining_percent or 0.0 for h in windows.values())
        ranked.append(
            RankedRoute(
                spec.runtime,
                spec.account,
                spec.lane,
                spec.pool,
                limiting.window,
                limiting.remaining,
                limiting.latest.reset_at,
                limiting.slack,
                score,
                weight,
                score * weight,
                lane,
                lowest,
            )
        )
    ranked.sort(
        key=lambda r: (
            -r.priority,
            -r.score,
            r.remaining_percent,
            r.reset_at if r.reset_at is not None else float("inf"),
            r.runtime,
            r.account or "",
            r.lane,
        )
    )
    diverse = len({(r.pool, r.lane) for r in ranked}) >= 2
    return CapacityOrder(now, ranked, omitted, deferred, unavailable, not diverse)
