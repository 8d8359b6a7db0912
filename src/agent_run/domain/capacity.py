"""Capacity ranking rules, pure: readings of quota windows in, one choice per credential pool
ranked for new work out.

The rules are docs/capacity.md's, word for word; `tests/test_capacity_rules.py` holds the
golden cases. One window's judgement (burn, forecast, marker, label, risk) is in
domain/capacity_windows.py. Nothing here reads a clock, a file or a database: `now` is a
parameter.
"""

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from agent_run.domain.capacity_windows import (
    HIGH_RISK_PERCENT,
    MEDIUM_RISK_PERCENT,
    MIN_BURN_SPAN_HOURS,
    Marker,
    Reading,
    Risk,
    SetAsideLabel,
    WindowState,
    burn_rate,
    clamp,
    risk,
    window_label,
    window_state,
)

__all__ = [
    "ACCOUNT_LANE",
    "HIGH_RISK_PERCENT",
    "MEDIUM_RISK_PERCENT",
    "MIN_BURN_SPAN_HOURS",
    "Alias",
    "CapacityOrder",
    "Marker",
    "RankedRoute",
    "Reading",
    "Risk",
    "RouteSpec",
    "SetAside",
    "SetAsideLabel",
    "WindowState",
    "WindowView",
    "burn_rate",
    "capacity_order",
    "clamp",
    "credit_factor",
    "model_lane",
    "narrowed",
    "rank",
    "risk",
    "window_state",
]

ENGINE_VALIDITY_SECONDS = 900.0  # engine streams and the Codex app-server
CONFLICT_PERCENT = 10.0  # two fresh readings of one pool window further apart than this conflict
CONFLICT_RESET_SECONDS = 60.0  # ... or with resets further apart than this

ACCOUNT_LANE = "default"  # the account-wide lane: every model of the account spends it


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
class Alias:
    """One (runtime, account) spending a pool, with its own weight (RouteSpec.own_weight)."""

    runtime: str
    account: str | None
    weight: float


@dataclass(frozen=True)
class WindowView:
    """Why one window of a route counts as it does: what is left, the forecast at its reset
    (`projected_percent`, marker "projected" only), its slack and what that rests on, or the
    label saying why it cannot take new work."""

    lane: str
    window: str
    remaining_percent: float | None
    reset_at: float | None
    burn_per_hour: float | None
    evidence_hours: float
    projected_percent: float | None
    slack: float | None
    marker: Marker | None
    label: SetAsideLabel | None


@dataclass(frozen=True)
class RankedRoute:
    """One choice of a pool: named by its alias of the highest weight (`aliases`, highest
    first: every (runtime, account) spending the pool), whose weight is the pool's."""

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
    reset_credits: int = 0
    credit_factor: float = 1.0
    aliases: tuple[Alias, ...] = ()
    windows: tuple[WindowView, ...] = ()


@dataclass(frozen=True)
class SetAside:
    runtime: str
    account: str | None
    lane: str
    reason: str
    pool: str = ""
    label: SetAsideLabel = "missing_sample"
    aliases: tuple[Alias, ...] = ()
    windows: tuple[WindowView, ...] = ()


@dataclass(frozen=True)
class CapacityOrder:
    observed_at: float
    routes: list[RankedRoute] = field(default_factory=list)
    omitted: list[SetAside] = field(default_factory=list)
    deferred: list[SetAside] = field(default_factory=list)
    unavailable_runtimes: list[str] = field(default_factory=list)
    insufficient_diversity: bool = True


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


def credit_factor(credits: int) -> float:
    """A route whose account can still redeem n >= 1 rate-limit resets: priority x (1 + n/(n+1))."""
    return 1.0 + credits / (credits + 1.0) if credits >= 1 else 1.0


def _credits(windows: dict[tuple[str, str], list[Reading]]) -> int:
    """The reset credits the newest latest reading of the route's windows reports (0: none)."""
    said = [h[-1] for h in windows.values() if h[-1].reset_credits is not None]
    if not said:
        return 0
    credits = max(said, key=lambda r: r.observed_at).reset_credits
    return credits if credits is not None else 0


@dataclass(frozen=True)
class _Judgement:
    verdict: Literal["rank", "omit", "defer"]
    label: SetAsideLabel | None
    reason: str
    windows: tuple[WindowView, ...]
    limiting: tuple[str, WindowState] | None = None  # (lane, state) of a ranked route


def _explain(key: tuple[str, str], state: WindowState, label: SetAsideLabel | None) -> WindowView:
    latest = state.latest
    return WindowView(
        key[0],
        key[1],
        latest.remaining_percent,
        latest.reset_at,
        state.burn_per_hour,
        state.span_hours,
        state.projected_percent,
        state.slack,
        state.marker,
        label,
    )


def _limiting(states: dict[tuple[str, str], WindowState]) -> tuple[str, str]:
    """The window with the least slack; among equal slacks one with a reset, then the earliest
    reset, then key order (lane, window)."""
    return min(
        states,
        key=lambda key: (
            states[key].slack,
            states[key].latest.reset_at is None,
            states[key].latest.reset_at or math.inf,
            key,
        ),
    )


def _judge_route(
    spec: RouteSpec, windows: dict[tuple[str, str], list[Reading]], now: float
) -> _Judgement:
    """Rank, omit (a window is exhausted) or defer (no reading of the route's own lane, readings
    that conflict, a window with no fresh reading), with the label of the first such window."""
    keys = sorted(windows)
    states = {key: window_state(windows[key], now) for key in keys}
    conflicts = [key for key in keys if _conflicting(windows[key], now)]
    labels = {
        key: window_label(states[key], now) or ("conflict" if key in conflicts else None)
        for key in keys
    }
    views = tuple(_explain(key, states[key], labels[key]) for key in keys)
    if not any(lane == spec.lane for lane, _ in keys):
        return _Judgement("defer", "missing_sample", f"no reading for lane {spec.lane}", views)
    exhausted = [key for key in keys if labels[key] == "exhausted"]
    if exhausted:
        name = _named(spec, *exhausted[0])
        return _Judgement("omit", "exhausted", f"window {name} is exhausted (0 % left)", views)
    if conflicts:
        name = _named(spec, *conflicts[0])
        return _Judgement("defer", "conflict", f"window {name}: readings conflict", views)
    unfit = [key for key in keys if labels[key] is not None]
    if unfit:
        names = ", ".join(_named(spec, *key) for key in unfit)
        return _Judgement("defer", labels[unfit[0]], f"no fresh reading for window {names}", views)
    lane, window = _limiting(states)
    return _Judgement("rank", None, "", views, (lane, states[(lane, window)]))


def _ranked(
    spec: RouteSpec,
    aliases: tuple[Alias, ...],
    windows: dict[tuple[str, str], list[Reading]],
    judged: _Judgement,
) -> RankedRoute:
    assert judged.limiting is not None
    lane, limiting = judged.limiting
    assert limiting.slack is not None and limiting.remaining is not None  # fresh, known
    score = 1.0 + limiting.slack
    credits = _credits(windows)
    factor = credit_factor(credits)
    weight = aliases[0].weight  # the pool's: the highest of its aliases', never the sum
    return RankedRoute(
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
        score * weight * factor,
        lane,
        min(h[-1].remaining_percent or 0.0 for h in windows.values()),
        credits,
        factor,
        aliases,
        judged.windows,
    )


def _rank_key(r: RankedRoute) -> tuple[float, float, float, float, str, str, str]:
    """Priority, then score (both descending), then more left in the route's lowest window,
    then the earliest reset, then names."""
    return (
        -r.priority,
        -r.score,
        -r.lowest_remaining_percent,
        r.reset_at if r.reset_at is not None else math.inf,
        r.runtime,
        r.account or "",
        r.lane,
    )


def rank(routes: Iterable[RankedRoute]) -> list[RankedRoute]:
    return sorted(routes, key=_rank_key)


def narrowed(route: RankedRoute, applies: Callable[[Alias], bool]) -> RankedRoute | None:
    """The route as a request only some of its aliases can serve sees it (a runtime offering
    the model): named by the applicable alias of the highest weight, whose weight is then the
    pool's; None when no alias applies."""
    usable = [alias for alias in route.aliases if applies(alias)]
    if not usable:
        return None
    best = usable[0]  # aliases are ordered by weight, highest first
    return replace(
        route,
        runtime=best.runtime,
        account=best.account,
        weight=best.weight,
        priority=route.score * best.weight * route.credit_factor,
    )


def _pools(
    specs: Sequence[RouteSpec], unavailable: list[str]
) -> list[tuple[RouteSpec, tuple[Alias, ...]]]:
    """One choice per (pool, lane): its alias of the highest weight (then by name) and every
    alias, highest weight first."""
    members: dict[tuple[str, str], list[RouteSpec]] = defaultdict(list)
    for spec in specs:
        if spec.runtime not in unavailable:
            members[(spec.pool, spec.lane)].append(spec)
    chosen = []
    for group in members.values():
        group.sort(key=lambda s: (-s.own_weight, s.runtime, s.account or ""))
        aliases = tuple(Alias(s.runtime, s.account, s.own_weight) for s in group)
        chosen.append((group[0], aliases))
    return sorted(chosen, key=lambda c: (c[0].runtime, c[0].account or "", c[0].lane))


def capacity_order(
    specs: Sequence[RouteSpec], readings: Iterable[Reading], now: float
) -> CapacityOrder:
    """One choice per pool, ranked for new work (rank()); the others set aside with a label."""
    grouped = _group(readings)
    seen_pools = {pool for pool, _lane in grouped}
    # a runtime none of whose pools has any reading, fresh or stale, is unavailable
    with_evidence = {s.runtime for s in specs if s.pool in seen_pools}
    unavailable = sorted({s.runtime for s in specs} - with_evidence)
    ranked: list[RankedRoute] = []
    omitted: list[SetAside] = []
    deferred: list[SetAside] = []
    for spec, aliases in _pools(specs, unavailable):
        windows = _route_windows(spec, grouped)
        judged = _judge_route(spec, windows, now)
        if judged.verdict == "rank":
            ranked.append(_ranked(spec, aliases, windows, judged))
            continue
        aside = SetAside(
            spec.runtime,
            spec.account,
            spec.lane,
            judged.reason,
            spec.pool,
            judged.label or "missing_sample",
            aliases,
            judged.windows,
        )
        (omitted if judged.verdict == "omit" else deferred).append(aside)
    diverse = len({r.pool for r in ranked}) >= 2  # independent pools: one account's lanes are one
    return CapacityOrder(now, rank(ranked), omitted, deferred, unavailable, not diverse)
