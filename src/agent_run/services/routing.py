"""`start --route auto`: the route a new agent runs on, the top of `capacity_order` at admission
among the runtimes offering the requested model (or the pairs of a `[model_classes]` entry)."""

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_run.config.model import Config
from agent_run.domain import capacity as rules
from agent_run.domain import errors
from agent_run.domain.failures import FailureKind
from agent_run.domain.requests import StartParams
from agent_run.domain.views import AgentView
from agent_run.services.capacity import readings, route_specs, unusable_runtimes
from agent_run.services.context import ServiceContext
from agent_run.store import rosters as rosters_q
from agent_run.store import samples as samples_q


@dataclass(frozen=True)
class RouteChoice:
    """What `--route auto` chose, and the request as the caller sent it (its idempotency key)."""

    route: str  # runtime/account/lane, account `-` for the runtime's own auth
    reason: str
    requested: StartParams


def route_name(runtime: str, account: str | None, lane: str) -> str:
    return f"{runtime}/{account or '-'}/{lane}"


def check_plain_route(p: Any) -> None:
    """Without `route`, the routing fields mean nothing: refuse them rather than ignore them."""
    for name in ("model_class", "min_remaining"):
        if getattr(p, name, None) is not None:
            raise errors.InvalidRequest(f"{name} needs route = auto", field=name)


def route_candidates(config: Config, p: Any) -> dict[str, str]:
    """runtime -> the model it would run, for the runtimes `--route auto` may choose among."""
    for name in ("runtime", "account"):
        if getattr(p, name, None) is not None:
            raise errors.InvalidRequest(
                f"route auto chooses the runtime and account: do not pass {name}", field=name
            )
    enabled = {name for name, r in config.runtimes.items() if r.enabled}
    if p.model_class is not None:
        if p.model is not None:
            raise errors.InvalidRequest("pass model or model_class, not both", field="model_class")
        pairs = config.model_classes.get(p.model_class)
        if pairs is None:
            known = ", ".join(sorted(config.model_classes)) or "none is configured"
            raise errors.InvalidRequest(
                f"no model class {p.model_class!r} (model_classes: {known})", field="model_class"
            )
        wanted: dict[str, str] = {}
        for pair in pairs:  # the first pair of a runtime wins
            runtime, model = pair.split(":", 1)
            if runtime in enabled:
                wanted.setdefault(runtime, model)
        return wanted
    if p.model is None:
        raise errors.InvalidRequest("route auto needs model or model_class", field="model")
    wanted = {name: p.model for name in sorted(enabled) if p.model in config.runtimes[name].models}
    if not wanted:
        raise errors.InvalidRequest(
            f"no enabled runtime lists model {p.model!r} in its models", field="model"
        )
    return wanted


def model_lanes(
    config: Config,
    found: list[rules.Reading],
    specs: list[rules.RouteSpec],
    wanted: dict[str, str],
) -> dict[tuple[str, str], str]:
    """(runtime, pool) -> the lane the wanted runtime's model spends in that pool
    (rules.model_lane over the lanes read for the pool), for every route of a wanted runtime."""
    seen: dict[str, set[str]] = defaultdict(set)
    for reading in found:
        seen[reading.pool].add(reading.lane)
    lanes = {}
    for spec in specs:
        if spec.runtime in wanted:
            model = wanted[spec.runtime]
            configured = config.runtimes[spec.runtime].model_lanes.get(model)
            lanes[(spec.runtime, spec.pool)] = rules.model_lane(model, seen[spec.pool], configured)
    return lanes


def _offering(
    route: rules.RankedRoute | rules.SetAside,
    wanted: dict[str, str],
    lanes: dict[tuple[str, str], str],
) -> Callable[[rules.Alias], bool]:
    """Whether an alias of `route` can serve the request: its runtime is wanted and the route is
    on the lane the runtime's model spends (the account-wide lane when its account has no
    reading of another lane)."""

    def applies(alias: rules.Alias) -> bool:
        lane = lanes.get((alias.runtime, route.pool), rules.ACCOUNT_LANE)
        return alias.runtime in wanted and route.lane == lane

    return applies


def _candidates(
    order: rules.CapacityOrder, wanted: dict[str, str], lanes: dict[tuple[str, str], str]
) -> list[rules.RankedRoute]:
    """The ranked routes the request can use, each named by (and weighted as) its best alias
    that can serve it, ranked again with those weights."""
    found = (rules.narrowed(r, _offering(r, wanted, lanes)) for r in order.routes)
    return rules.rank(r for r in found if r is not None)


def _aside(
    items: list[rules.SetAside], wanted: dict[str, str], lanes: dict[tuple[str, str], str]
) -> list[str]:
    named = []
    for a in items:
        usable = [alias for alias in a.aliases if _offering(a, wanted, lanes)(alias)]
        if usable:
            named.append(f"{route_name(usable[0].runtime, usable[0].account, a.lane)}: {a.reason}")
    return named


def _labels(
    order: rules.CapacityOrder, wanted: dict[str, str], lanes: dict[tuple[str, str], str]
) -> dict[str, str]:
    """route name -> its set-aside label, for the routes NoCapacity lists."""
    labels = {}
    for a in order.omitted + order.deferred:
        for alias in a.aliases:
            if _offering(a, wanted, lanes)(alias):
                labels[route_name(alias.runtime, alias.account, a.lane)] = a.label
    return labels


def pick(
    order: rules.CapacityOrder,
    wanted: dict[str, str],
    floor: float,
    lanes: dict[tuple[str, str], str],
    unusable: dict[str, str] | None = None,
) -> rules.RankedRoute:
    """The top ranked route of a `wanted` runtime on its model's lane with more than `floor` %
    left in every window it spends; NoCapacity (listing what was set aside and why) when there
    is none. An account whose account-wide window is exhausted is never picked: every route of
    it spends that window, so every one is omitted."""
    eligible = _candidates(order, wanted, lanes)
    above = [r for r in eligible if r.lowest_remaining_percent > floor]
    if above:
        return above[0]
    low = [
        f"{route_name(r.runtime, r.account, r.lane)}: {r.lowest_remaining_percent:g} % left "
        f"in its lowest window, not above {floor:g}"
        for r in eligible
    ]
    unavailable = [name for name in order.unavailable_runtimes if name in wanted]
    raise errors.NoCapacity(
        f"no route of {', '.join(sorted(wanted))} has fresh capacity above {floor:g} %",
        field="route",
        omitted=_aside(order.omitted, wanted, lanes),
        deferred=_aside(order.deferred, wanted, lanes),
        labels=_labels(order, wanted, lanes),
        below_min_remaining=low,
        unavailable_runtimes=unavailable,
        unusable_runtimes=[
            f"{name}: {why}" for name, why in (unusable or {}).items() if name in wanted
        ],
    )


async def choose_route(
    ctx: ServiceContext, p: StartParams, config: Config
) -> tuple[StartParams, RouteChoice | None]:
    """The request with `--route auto` resolved to a runtime, model and account (else as sent)."""
    if p.route is None:
        check_plain_route(p)
        return p, None
    wanted = route_candidates(config, p)
    cached = await ctx.db(rosters_q.rosters)  # a runtime whose engine does not list the model: out
    wanted = {
        name: model
        for name, model in wanted.items()
        if name not in cached or model in cached[name].models
    }
    if not wanted:
        raise errors.InvalidRequest(
            "no candidate runtime's engine lists the model (see `agent-run models`: available)",
            field="model_class" if p.model_class else "model",
        )
    found = readings(config, await ctx.db(samples_q.samples_since, 0.0), ctx.home.root)
    specs = route_specs(config, found, ctx.home.root)
    order = rules.capacity_order(specs, found, time.time())
    lanes = model_lanes(config, found, specs, wanted)
    top = pick(order, wanted, p.min_remaining or 0.0, lanes, unusable_runtimes(config))
    ranked = len(_candidates(order, wanted, lanes))
    credits = f" x {top.credit_factor:.2f} for {top.reset_credits} reset credit(s)"
    reason = (
        f"top of capacity_order among {ranked} ranked route(s) offering the model: priority "
        f"{top.priority:.2f} (score {top.score:.2f} x weight {top.weight:g}"
        f"{credits if top.reset_credits else ''}); limiting window "
        f"{_window_name(top)} at {top.remaining_percent:g} % left"
    )
    chosen = p.model_copy(
        update={"runtime": top.runtime, "model": wanted[top.runtime], "account": top.account}
    )
    return chosen, RouteChoice(route_name(top.runtime, top.account, top.lane), reason, p)


def _window_name(route: rules.RankedRoute) -> str:
    if route.limiting_lane == route.lane:
        return route.limiting_window
    return f"{route.limiting_lane}/{route.limiting_window}"


_ROUTE_FAILURES = (FailureKind.QUOTA_EXHAUSTED, FailureKind.RATE_LIMITED)


def next_route_advice(
    config: Config,
    order: rules.CapacityOrder,
    lanes: dict[tuple[str, str], str],
    runtime: str,
    account: str | None,
    model: str,
) -> str:
    """The next viable route for a run that hit its quota: the top ranked route on the model's
    lane of a runtime listing `model`, other than the run's own (runtime, account) (the same
    candidates as `--route auto`). Advice only: a run never switches account."""
    offering = {
        name: model
        for name, options in config.runtimes.items()
        if options.enabled and model in options.models
    }
    for r in _candidates(order, offering, lanes):
        same_pool = any((a.runtime, a.account) == (runtime, account) for a in r.aliases)
        if not same_pool:  # an alias of the run's own pool spends the same quota
            flags = f"--runtime {r.runtime}" + (f" --account {r.account}" if r.account else "")
            return (
                f"Next viable route (capacity_order): {route_name(r.runtime, r.account, r.lane)}, "
                f"{r.remaining_percent:g} % left in {_window_name(r)}: start again with "
                f"`{flags} --model {model}` or `--route auto`."
            )
    return "No other route offering this model has fresh capacity now (see `agent-run capacity order`)."


async def with_next_route(ctx: ServiceContext, view: AgentView) -> AgentView:
    """A quota or rate-limit failure's advice, completed with the next viable route now."""
    kind = view.execution.failure_kind
    if kind not in _ROUTE_FAILURES or view.execution.failure_advice is None:
        return view
    config = ctx.config
    found = readings(config, await ctx.db(samples_q.samples_since, 0.0), ctx.home.root)
    specs = route_specs(config, found, ctx.home.root)
    order = rules.capacity_order(specs, found, time.time())
    offering = {name: view.model for name, r in config.runtimes.items() if view.model in r.models}
    lanes = model_lanes(config, found, specs, offering)
    advice = next_route_advice(config, order, lanes, view.runtime, view.account, view.model)
    execution = view.execution.model_copy(
        update={"failure_advice": f"{view.execution.failure_advice} {advice}"}
    )
    return view.model_copy(update={"execution": execution})
