"""The capacity tools: `limits` (fresh readings per window), `capacity_order` (routes ranked for
new work) and `capacity_collect` (ask every source once). Rules in domain/capacity.py."""

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent_run.config.model import Config
from agent_run.domain import capacity as rules
from agent_run.domain.requests import EmptyParams, LimitsParams
from agent_run.domain.views import (
    CapacityOrderResult,
    CollectResult,
    LimitsResult,
    LimitWindow,
    RankedRouteView,
    RouteAlias,
    SetAsideRoute,
    UnusableRuntime,
    WindowExplanation,
)
from agent_run.engines.accounts import account_identity
from agent_run.engines.options import RuntimeOptions
from agent_run.services.capacity_sources import Collected, collect_all, measured_accounts
from agent_run.services.context import ServiceContext
from agent_run.services.doctor import binary_problem
from agent_run.store import samples as samples_q
from agent_run.store.db import write
from agent_run.store.rosters import put_rosters
from agent_run.store.samples import Sample


def _measured(config: Config) -> dict[str, RuntimeOptions]:
    return {
        name: r for name, r in config.runtimes.items() if r.enabled and r.limits_source != "none"
    }


def readings(config: Config, samples: list[Sample], home_root: Path) -> list[rules.Reading]:
    """Samples of measured runtimes, mapped to the pools they measure: the provider account
    identity of the sample's (runtime, account) credential (engines/accounts.account_identity)."""
    runtimes = _measured(config)
    pools: dict[tuple[str, str | None], str] = {}

    def pool(runtime: str, account: str | None) -> str:
        if (runtime, account) not in pools:
            pools[(runtime, account)] = account_identity(
                runtimes[runtime], runtime, account, home_root
            )
        return pools[(runtime, account)]

    return [
        rules.Reading(
            pool(s.runtime, s.account),
            s.lane,
            s.window,
            s.remaining_percent,
            s.reset_at,
            s.observed_at,
            s.valid_until,
            s.runtime,
            s.account,
            s.source,
            s.reset_credits,
        )
        for s in samples
        if s.runtime in runtimes
        and (s.account is None or s.account in runtimes[s.runtime].accounts)
    ]


def unusable_runtimes(config: Config) -> dict[str, str]:
    """Measured runtimes `doctor` finds unusable (their engine CLI is not there), with why: never
    ranked, whatever readings their pools have."""
    found = {name: binary_problem(options) for name, options in _measured(config).items()}
    return {name: problem for name, problem in sorted(found.items()) if problem is not None}


def route_specs(
    config: Config, found: list[rules.Reading], home_root: Path
) -> list[rules.RouteSpec]:
    """One route per (runtime, account, lane) seen in a reading of its pool; "default" when none;
    none of an unusable runtime. The accounts are the runtime's own auth (unless a default
    account replaces it) and each label."""
    lanes: dict[str, set[str]] = defaultdict(set)
    for reading in found:
        lanes[reading.pool].add(reading.lane)
    unusable = unusable_runtimes(config)
    specs = []
    for name, options in sorted(_measured(config).items()):
        if name in unusable:
            continue
        for account in measured_accounts(options):
            pool = account_identity(options, name, account, home_root)
            for lane in sorted(lanes.get(pool) or {"default"}):
                specs.append(
                    rules.RouteSpec(
                        name,
                        account,
                        lane,
                        pool,
                        options.priority_multiplier,
                        options.priority_account_multipliers.get(account) if account else None,
                        options.priority_lane_multipliers.get(lane),
                    )
                )
    return specs


def order_now(config: Config, samples: list[Sample], home_root: Path) -> rules.CapacityOrder:
    """`capacity_order` over the stored samples, judged now."""
    found = readings(config, samples, home_root)
    return rules.capacity_order(route_specs(config, found, home_root), found, time.time())


async def _readings(ctx: ServiceContext) -> list[rules.Reading]:
    samples = await ctx.db(samples_q.samples_since, 0.0)
    return readings(ctx.config, samples, ctx.home.root)


def _advice(state: rules.WindowState, risk: str, now: float) -> str:
    reset = state.latest.reset_at
    until = (
        f"resets in {max(0.0, (reset - now) / 3600):.1f} h"
        if reset is not None
        else "reset unknown"
    )
    if risk == "unknown":
        return "stale or unknown: run `agent-run capacity collect`, or any run of this runtime, to read it"
    if state.remaining == 0:
        return f"exhausted: send new work elsewhere ({until})"
    if risk == "high":
        return f"nearly spent: prefer another route ({until})"
    if risk == "medium":
        return f"spend with care ({until})"
    return f"room to spare ({until})"


def limit_windows(found: list[rules.Reading], now: float, runtime: str | None) -> list[LimitWindow]:
    """The latest reading of every (runtime, account, lane, window), judged at `now`."""
    history: dict[tuple[str, str | None, str, str], list[rules.Reading]] = defaultdict(list)
    for reading in sorted(found, key=lambda r: r.observed_at):
        if runtime is None or reading.runtime == runtime:
            history[(reading.runtime, reading.account, reading.lane, reading.window)].append(
                reading
            )
    windows = []
    for (name, account, lane, window), readings_ in sorted(
        history.items(), key=lambda kv: str(kv[0])
    ):
        state = rules.window_state(readings_, now)
        risk = rules.risk(state, now)
        windows.append(
            LimitWindow(
                runtime=name,
                account=account,
                lane=lane,
                window=window,
                known=state.fresh,
                remaining_percent=state.remaining,
                reset_at=state.latest.reset_at,
                observed_at=state.latest.observed_at,
                age_seconds=max(0.0, now - state.latest.observed_at),
                source=state.latest.source,
                burn_percent_per_hour=state.burn_per_hour,
                risk=risk,
                advice=_advice(state, risk, now),
                evidence_hours=state.span_hours,
                projected_percent=state.projected_percent,
                slack=state.slack,
                marker=state.marker,
                reset_credits=state.latest.reset_credits,
            )
        )
    return windows


async def limits(ctx: ServiceContext, p: LimitsParams) -> LimitsResult:
    now = time.time()
    return LimitsResult(
        observed_at=now, windows=limit_windows(await _readings(ctx), now, p.runtime)
    )


def _aliases(aliases: tuple[rules.Alias, ...]) -> list[RouteAlias]:
    return [RouteAlias(runtime=a.runtime, account=a.account, weight=a.weight) for a in aliases]


def _windows(views: tuple[rules.WindowView, ...]) -> list[WindowExplanation]:
    return [
        WindowExplanation(
            lane=w.lane,
            window=w.window,
            remaining_percent=w.remaining_percent,
            reset_at=w.reset_at,
            burn_percent_per_hour=w.burn_per_hour,
            evidence_hours=w.evidence_hours,
            projected_percent=w.projected_percent,
            slack=w.slack,
            marker=w.marker,
            label=w.label,
        )
        for w in views
    ]


def _ranked_view(r: rules.RankedRoute) -> RankedRouteView:
    return RankedRouteView(
        runtime=r.runtime,
        account=r.account,
        lane=r.lane,
        aliases=_aliases(r.aliases),
        limiting_window=r.limiting_window,
        limiting_lane=r.limiting_lane,
        remaining_percent=r.remaining_percent,
        lowest_remaining_percent=r.lowest_remaining_percent,
        reset_at=r.reset_at,
        slack=r.slack,
        score=r.score,
        weight=r.weight,
        reset_credits=r.reset_credits,
        credit_factor=r.credit_factor,
        priority=r.priority,
        windows=_windows(r.windows),
    )


def order_view(
    order: rules.CapacityOrder, unusable: dict[str, str] | None = None
) -> CapacityOrderResult:
    def aside(items: list[rules.SetAside]) -> list[SetAsideRoute]:
        return [
            SetAsideRoute(
                runtime=a.runtime,
                account=a.account,
                lane=a.lane,
                label=a.label,
                reason=a.reason,
                aliases=_aliases(a.aliases),
                windows=_windows(a.windows),
            )
            for a in items
        ]

    return CapacityOrderResult(
        observed_at=order.observed_at,
        routes=[_ranked_view(r) for r in order.routes],
        omitted=aside(order.omitted),
        deferred=aside(order.deferred),
        unavailable_runtimes=order.unavailable_runtimes,
        unusable_runtimes=[
            UnusableRuntime(runtime=name, reason=reason)
            for name, reason in (unusable or {}).items()
        ],
        insufficient_diversity=order.insufficient_diversity,
    )


async def capacity_order(ctx: ServiceContext, _p: EmptyParams) -> CapacityOrderResult:
    samples = await ctx.db(samples_q.samples_since, 0.0)
    order = order_now(ctx.config, samples, ctx.home.root)
    return order_view(order, unusable_runtimes(ctx.config))


async def capacity_collect(ctx: ServiceContext, _p: EmptyParams) -> CollectResult:
    """Ask every configured source once; a failing source is no evidence, never an error. Each
    source's samples (and model roster) are stored as soon as it answers: a slow one delays
    no other."""
    now = time.time()
    retention = ctx.config.capacity.sample_retention

    async def store(found: Collected | None) -> None:
        samples = found.samples if found else []  # None: only trim (runs write samples too)
        rosters = [found.roster] if found and found.roster else []

        def write_rows(conn: Any) -> None:
            with write(conn, "capacity samples and model rosters"):
                samples_q.append_samples(conn, samples, retention)
                put_rosters(conn, rosters)

        await ctx.db(write_rows)

    collected = await collect_all(ctx.config, ctx.home, now, store)
    await store(None)
    return CollectResult(observed_at=now, sources=[c.outcome for c in collected])


async def collect_forever(ctx: ServiceContext, log: Any) -> None:
    """The daemon's periodic collection: every `collect_interval_seconds`, the first one interval
    after boot (each pass also trims the samples the runs wrote to `sample_retention`)."""
    while True:
        await asyncio.sleep(ctx.config.capacity.collect_interval_seconds)
        try:
            result = await capacity_collect(ctx, EmptyParams())
            for source in result.sources:
                if source.error is not None and log is not None:
                    log.warning(
                        "capacity.no_evidence",
                        runtime=source.runtime,
                        source=source.source,
                        error=source.error,
                    )
        except Exception as exc:  # keep collecting; the next pass may succeed
            if log is not None:
                log.error("capacity.error", error=repr(exc))
