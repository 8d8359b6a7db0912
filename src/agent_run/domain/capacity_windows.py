"""One quota window's readings judged at `now`, pure: is the latest one usable (and if not, the
machine label saying why), its burn, its forecast at the reset (and the marker saying what the
forecast rests on), its slack, its risk. docs/capacity.md, "capacity_order: the rules" 4-5; the
route-level rules are in domain/capacity.py."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

HIGH_RISK_PERCENT = 10.0
MEDIUM_RISK_PERCENT = 30.0
MIN_BURN_SPAN_HOURS = 1.0

Risk = Literal["high", "medium", "low", "unknown"]
# What a window's slack rests on: burn known over >= 1 h ("projected"), one reading only
# ("warmup"), readings less than an hour apart ("thin_evidence"), no reset time ("no_reset").
Marker = Literal["projected", "warmup", "thin_evidence", "no_reset"]
# Why a window (and so every route spending it) cannot take new work now.
SetAsideLabel = Literal[
    "exhausted", "conflict", "missing_sample", "malformed", "expired", "stale_sample"
]


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
    reset_credits: int | None = None  # resets the account may still redeem, when it said

    def fresh(self, now: float) -> bool:
        reset_passed = self.reset_at is not None and self.reset_at <= now
        return self.observed_at <= now <= self.valid_until and not reset_passed


@dataclass(frozen=True)
class WindowState:
    """What the rules make of one window of a pool at `now`. The forecast (marker, projected,
    slack) exists for a fresh reading with a value only."""

    window: str
    latest: Reading
    fresh: bool
    burn_per_hour: float | None
    span_hours: float
    slack: float | None
    marker: Marker | None = None
    projected_percent: float | None = None  # marker "projected" only; negative: runs out first

    @property
    def remaining(self) -> float | None:
        return self.latest.remaining_percent


def clamp(value: float, low: float = -1.0, high: float = 1.0) -> float:
    return max(low, min(high, value))


def _same_reset(history: Sequence[Reading]) -> list[Reading]:
    """The readings with a value sharing the latest reading's reset, oldest first."""
    latest_reset = history[-1].reset_at if history else None
    return [r for r in history if r.reset_at == latest_reset and r.remaining_percent is not None]


def burn_rate(history: Sequence[Reading]) -> tuple[float | None, float]:
    """(% dropped per hour, span in hours) over the samples sharing the latest one's reset.

    `history` is one window's readings, oldest first. Fewer than two such samples with a
    remaining value, or no time between them: burn unknown. A rise counts as zero burn."""
    same = _same_reset(history)
    if len(same) < 2:
        return None, 0.0
    span_hours = (same[-1].observed_at - same[0].observed_at) / 3600.0
    if span_hours <= 0:
        return None, 0.0
    first, last = same[0].remaining_percent, same[-1].remaining_percent
    assert first is not None and last is not None
    return max(0.0, (first - last) / span_hours), span_hours


def marker(reset_at: float | None, span_hours: float) -> Marker:
    """What a slack rests on: no reset time known; one reading (or several of one moment: two
    aliases read together); readings less than MIN_BURN_SPAN_HOURS apart; else a projection
    of the burn to the reset. `span_hours`: burn_rate's."""
    if reset_at is None:
        return "no_reset"
    if span_hours <= 0:
        return "warmup"
    if span_hours < MIN_BURN_SPAN_HOURS:
        return "thin_evidence"
    return "projected"


def forecast(
    remaining: float, reset_at: float | None, burn: float | None, basis: Marker, now: float
) -> tuple[float, float | None]:
    """(slack, projected % at the reset). Projected: remaining - burn x hours to the reset,
    slack = that / 100; otherwise slack = 2 x remaining / 100 - 1 and no projection. Slack is
    clamped to [-1, 1]."""
    if basis == "projected" and burn is not None and reset_at is not None:
        projected = remaining - burn * max(0.0, (reset_at - now) / 3600.0)
        return clamp(projected / 100.0), projected
    return clamp(2.0 * remaining / 100.0 - 1.0), None


def window_state(history: Sequence[Reading], now: float) -> WindowState:
    """One window's readings (oldest first, non-empty) judged at `now`."""
    latest = history[-1]
    fresh = latest.fresh(now) and latest.remaining_percent is not None
    seen = [r for r in history if r.observed_at <= now]
    burn, span = burn_rate(seen)
    if not fresh or latest.remaining_percent is None:
        return WindowState(latest.window, latest, fresh, burn, span, None)
    basis = marker(latest.reset_at, span)
    slack, projected = forecast(latest.remaining_percent, latest.reset_at, burn, basis, now)
    return WindowState(latest.window, latest, fresh, burn, span, slack, basis, projected)


def window_label(state: WindowState, now: float) -> SetAsideLabel | None:
    """Why the window cannot take new work, or None: 0 % left and not reset yet (even when
    stale); no value, or observed after `now`; its reset passed since it was read; past its
    `valid_until`."""
    latest = state.latest
    if latest.remaining_percent == 0 and (latest.reset_at is None or latest.reset_at > now):
        return "exhausted"
    if latest.remaining_percent is None or latest.observed_at > now:
        return "malformed"
    if latest.reset_at is not None and latest.reset_at <= now:
        return "expired"
    if now > latest.valid_until:
        return "stale_sample"
    return None


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
