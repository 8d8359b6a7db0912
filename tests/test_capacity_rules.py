"""Golden cases of the capacity ranking rules (docs/capacity.md), on hand-written readings."""

import pytest

from agent_run.domain.capacity import (
    Reading,
    RouteSpec,
    capacity_order,
    model_lane,
    risk,
    window_state,
)
from agent_run.domain.errors import NoCapacity
from agent_run.services.routing import pick

NOW = 1_800_000_000.0
H = 3600.0


def reading(
    pool: str,
    remaining: float | None,
    *,
    ago: float = 0.0,
    reset_in: float = H,
    window: str = "5h",
    lane: str = "default",
    runtime: str | None = None,
    valid: float = 900.0,
    source: str = "native",
) -> Reading:
    observed = NOW - ago
    return Reading(
        pool=pool,
        lane=lane,
        window=window,
        remaining_percent=remaining,
        reset_at=NOW + reset_in,
        observed_at=observed,
        valid_until=observed + valid,
        runtime=runtime or pool,
        source=source,
    )


def route(runtime: str, pool: str | None = None, **weights: float) -> RouteSpec:
    return RouteSpec(runtime=runtime, account=None, lane="default", pool=pool or runtime, **weights)


def test_worked_example_weighted_burning_route_beats_idle_one() -> None:
    # 80 % left burning 20 %/h (100 % an hour ago), reset in 1 h: projected 60 -> slack 0.6 -> 1.6,
    # weight 2.0 -> 3.2; a 90 % route with zero burn over an hour: slack 0.9 -> 1.9.
    readings = [
        reading("a", 100.0, ago=H),
        reading("a", 80.0),
        reading("b", 90.0, ago=H),
        reading("b", 90.0),
    ]
    order = capacity_order([route("a", runtime_multiplier=2.0), route("b")], readings, NOW)
    assert [r.runtime for r in order.routes] == ["a", "b"]
    first, second = order.routes
    assert first.slack == pytest.approx(0.6) and first.score == pytest.approx(1.6)
    assert first.priority == pytest.approx(3.2)
    assert second.score == pytest.approx(1.9) and second.priority == pytest.approx(1.9)
    assert order.insufficient_diversity is False
    # unweighted, the idle route wins
    plain = capacity_order([route("a"), route("b")], readings, NOW)
    assert [r.runtime for r in plain.routes] == ["b", "a"]


def test_without_an_hour_of_burn_the_slack_comes_from_remaining_alone() -> None:
    readings = [reading("a", 90.0, ago=600), reading("a", 80.0)]  # 10 minutes of span
    (only,) = capacity_order([route("a")], readings, NOW).routes
    assert only.slack == pytest.approx(0.6)  # 2 * 0.8 - 1


def test_exhausted_window_is_omitted_and_never_revived_by_a_multiplier() -> None:
    readings = [
        reading("a", 0.0),
        reading("a", 50.0, window="7d", reset_in=5 * 24 * H),
        reading("b", 5.0),
    ]
    order = capacity_order([route("a", runtime_multiplier=1000.0), route("b")], readings, NOW)
    assert [r.runtime for r in order.routes] == ["b"]
    assert [(o.runtime, "exhausted" in o.reason) for o in order.omitted] == [("a", True)]
    assert order.insufficient_diversity is True


def test_exhausted_stays_omitted_after_the_reading_goes_stale_until_its_reset() -> None:
    order = capacity_order([route("a")], [reading("a", 0.0, ago=2000, reset_in=H)], NOW)
    assert [o.runtime for o in order.omitted] == ["a"] and order.routes == []


def test_stale_reading_defers_and_no_reading_at_all_is_unavailable() -> None:
    readings = [
        reading("a", 70.0, ago=1000),  # valid for 900 s: stale
        reading("b", 60.0, ago=10),
        reading("b", 60.0, window="7d", ago=2000),
    ]
    order = capacity_order([route("a"), route("b"), route("c")], readings, NOW)
    assert order.routes == []
    assert [(d.runtime, d.reason) for d in order.deferred] == [
        ("a", "no fresh reading for window 5h"),
        ("b", "no fresh reading for window 7d"),
    ]
    assert order.unavailable_runtimes == ["c"]


def test_passed_reset_makes_a_reading_stale() -> None:
    order = capacity_order([route("a")], [reading("a", 70.0, ago=10, reset_in=-1)], NOW)
    assert [d.runtime for d in order.deferred] == ["a"]


def test_unknown_remaining_defers() -> None:
    order = capacity_order([route("a")], [reading("a", None)], NOW)
    assert [d.runtime for d in order.deferred] == ["a"]


def test_conflicting_readings_of_one_pool_defer() -> None:
    readings = [reading("p", 80.0, runtime="a"), reading("p", 20.0, runtime="b")]
    order = capacity_order([route("a", "p"), route("b", "p")], readings, NOW)
    assert order.routes == [] and {d.reason for d in order.deferred} == {
        "window 5h: readings conflict"
    }
    moved = [reading("p", 80.0, runtime="a"), reading("p", 78.0, runtime="b", reset_in=H + 120)]
    assert len(capacity_order([route("a", "p")], moved, NOW).deferred) == 1
    agreeing = [
        reading("p", 80.0, runtime="a"),
        reading("p", 75.0, runtime="b", reset_in=H + 30, source="command"),
    ]
    assert [r.runtime for r in capacity_order([route("a", "p")], agreeing, NOW).routes] == ["a"]


def test_aliases_sharing_a_pool_take_the_max_weight_never_the_sum() -> None:
    readings = [reading("p", 50.0, runtime="a"), reading("q", 50.0, runtime="c")]
    specs = [
        route("a", "p", runtime_multiplier=2.0),
        route("b", "p", runtime_multiplier=3.0),
        route("c", "q", runtime_multiplier=4.0),
    ]
    order = capacity_order(specs, readings, NOW)
    by_runtime = {r.runtime: r for r in order.routes}
    assert by_runtime["a"].weight == 3.0 and by_runtime["b"].weight == 3.0  # not 5.0
    assert [r.runtime for r in order.routes][0] == "c"  # 1.0 * 4 beats 1.0 * 3
    assert order.insufficient_diversity is False


def test_multiplier_precedence_account_over_lane_over_runtime() -> None:
    assert RouteSpec("r", "x", "l", "p", 2.0, 5.0, 3.0).own_weight == 5.0
    assert RouteSpec("r", "x", "l", "p", 2.0, None, 3.0).own_weight == 3.0
    assert RouteSpec("r", "x", "l", "p", 2.0, None, None).own_weight == 2.0


def test_limiting_window_is_the_one_with_least_slack() -> None:
    readings = [reading("a", 90.0), reading("a", 40.0, window="7d", reset_in=48 * H)]
    (only,) = capacity_order([route("a")], readings, NOW).routes
    assert only.limiting_window == "7d" and only.remaining_percent == 40.0


def test_ties_break_by_earliest_reset_when_remaining_is_equal_too() -> None:
    # equal slack and weight: a (capped at slack 1 from 100 %) vs b, same priority
    readings = [reading("a", 100.0, reset_in=2 * H), reading("b", 100.0, reset_in=H)]
    order = capacity_order([route("a"), route("b")], readings, NOW)
    assert [r.runtime for r in order.routes] == ["b", "a"]


def test_risk_levels() -> None:
    assert risk(window_state([reading("a", 8.0)], NOW), NOW) == "high"
    assert risk(window_state([reading("a", 25.0)], NOW), NOW) == "medium"
    assert risk(window_state([reading("a", 90.0)], NOW), NOW) == "low"
    # 80 % left for 1 h, burning 60 %/h: sustainable 80 %/h -> above half -> medium
    burning = [reading("a", 100.0, ago=H / 3), reading("a", 80.0)]
    assert risk(window_state(burning, NOW), NOW) == "medium"
    assert risk(window_state([reading("a", 90.0, ago=2000)], NOW), NOW) == "unknown"


def lane_route(runtime: str, lane: str, pool: str | None = None) -> RouteSpec:
    return RouteSpec(runtime=runtime, account=None, lane=lane, pool=pool or runtime)


def test_a_model_lane_route_spends_the_account_wide_windows_too() -> None:
    # the audit's counter-example: Claude's default 5h at 0 %, its sonnet 7d at 50 %: the sonnet
    # route spends the exhausted 5h window too, so it is omitted, never ranked
    readings = [
        reading("claude", 0.0, window="5h"),
        reading("claude", 50.0, window="7d", lane="sonnet", reset_in=5 * 24 * H),
    ]
    specs = [lane_route("claude", "default"), lane_route("claude", "sonnet")]
    order = capacity_order(specs, readings, NOW)
    assert order.routes == []
    assert [(o.lane, o.reason) for o in order.omitted] == [
        ("default", "window 5h is exhausted (0 % left)"),
        ("sonnet", "window default/5h is exhausted (0 % left)"),
    ]


def test_a_model_lane_routes_limiting_window_may_be_the_account_wide_one() -> None:
    readings = [
        reading("claude", 20.0, window="5h"),  # slack -0.6
        reading("claude", 60.0, window="7d", lane="sonnet", reset_in=5 * 24 * H),  # slack 0.2
        reading("claude", 0.0, window="7d", lane="opus", reset_in=5 * 24 * H),
    ]
    specs = [lane_route("claude", lane) for lane in ("default", "opus", "sonnet")]
    order = capacity_order(specs, readings, NOW)
    sonnet = next(r for r in order.routes if r.lane == "sonnet")
    assert (sonnet.limiting_lane, sonnet.limiting_window) == ("default", "5h")
    assert sonnet.remaining_percent == 20.0 and sonnet.lowest_remaining_percent == 20.0
    assert sonnet.score == pytest.approx(0.4)
    # an exhausted model lane omits only its own route: the account-wide one still ranks
    assert [o.lane for o in order.omitted] == ["opus"]
    assert {r.lane for r in order.routes} == {"default", "sonnet"}


def test_a_model_lane_stale_account_wide_window_defers_it() -> None:
    readings = [
        reading("claude", 70.0, window="5h", ago=1000),  # stale
        reading("claude", 60.0, window="7d", lane="sonnet", reset_in=5 * 24 * H),
    ]
    (deferred,) = capacity_order([lane_route("claude", "sonnet")], readings, NOW).deferred
    assert deferred.reason == "no fresh reading for window default/5h"


def test_the_lane_a_model_spends() -> None:
    seen = {"default", "opus", "sonnet", "codex_bengalfox"}
    assert model_lane("claude-sonnet-4-5", seen) == "sonnet"
    assert model_lane("claude-opus-4-1", seen) == "opus"
    assert model_lane("claude-haiku-4-5", seen) == "default"
    assert model_lane("gpt-5.3-codex-spark", seen) == "default"  # no word names the lane ...
    assert model_lane("gpt-5.3-codex-spark", seen, "codex_bengalfox") == "codex_bengalfox"  # ...
    assert model_lane("claude-sonnet-4-5", {"default"}) == "default"  # a lane never read
    assert model_lane("gpt-x", {"default"}, "codex_bengalfox") == "default"


def test_ties_break_by_lowest_remaining_when_priority_and_score_are_equal() -> None:
    # both slack 0.6 over an hour of burn, reset in 1 h: a 80 % burning 20 %/h, b 70 % burning 10 %/h
    readings = [
        reading("a", 100.0, ago=H),
        reading("a", 80.0),
        reading("b", 80.0, ago=H),
        reading("b", 70.0),
    ]
    order = capacity_order([route("a"), route("b")], readings, NOW)
    assert [r.score for r in order.routes] == [pytest.approx(1.6), pytest.approx(1.6)]
    assert [r.runtime for r in order.routes] == ["b", "a"]  # 70 % before 80 %


def test_min_remaining_is_compared_with_every_window_of_the_route() -> None:
    # 5h at 20 % (slack -0.6) and 7d at 40 % burning toward -40 (slack -0.8): the limiting
    # window is the 7d one, but a 30 % floor must see the 5h window's 20 %
    readings = [
        reading("a", 20.0, window="5h"),
        reading("a", 70.0, window="7d", ago=H, reset_in=4 * H),
        reading("a", 40.0, window="7d", reset_in=4 * H),
        reading("b", 90.0),
    ]
    order = capacity_order([route("a"), route("b", runtime_multiplier=0.1)], readings, NOW)
    first = order.routes[0]
    assert (first.runtime, first.limiting_window, first.remaining_percent) == ("a", "7d", 40.0)
    assert first.lowest_remaining_percent == 20.0
    assert pick(order, {"a": "m", "b": "m"}, 30.0, {}).runtime == "b"
    assert pick(order, {"a": "m", "b": "m"}, 10.0, {}).runtime == "a"
    with pytest.raises(NoCapacity) as refused:
        pick(order, {"a": "m"}, 30.0, {})
    assert refused.value.details["below_min_remaining"] == [
        "a/-/default: 20 % left in its lowest window, not above 30"
    ]
