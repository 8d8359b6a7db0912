"""Golden cases of the capacity ranking rules (docs/capacity.md), on hand-written readings."""

import pytest

from agent_run.domain.capacity import (
    Alias,
    Reading,
    RouteSpec,
    capacity_order,
    credit_factor,
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
    reset_in: float | None = H,
    window: str = "5h",
    lane: str = "default",
    runtime: str | None = None,
    valid: float = 900.0,
    source: str = "native",
    credits: int | None = None,
) -> Reading:
    observed = NOW - ago
    return Reading(
        pool=pool,
        lane=lane,
        window=window,
        remaining_percent=remaining,
        reset_at=None if reset_in is None else NOW + reset_in,
        observed_at=observed,
        valid_until=observed + valid,
        runtime=runtime or pool,
        source=source,
        reset_credits=credits,
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


def test_aliases_sharing_a_pool_are_one_choice_weighted_by_the_largest_never_the_sum() -> None:
    readings = [reading("p", 50.0, runtime="a"), reading("q", 50.0, runtime="c")]
    specs = [
        route("a", "p", runtime_multiplier=2.0),
        route("b", "p", runtime_multiplier=3.0),
        route("c", "q", runtime_multiplier=4.0),
    ]
    order = capacity_order(specs, readings, NOW)
    # 50 %, one reading: slack 0.0, score 1.0; pool q 1.0 x 4 = 4.0, pool p 1.0 x 3 = 3.0
    assert [(r.runtime, r.weight, r.priority) for r in order.routes] == [
        ("c", 4.0, 4.0),
        ("b", 3.0, 3.0),  # not 5.0; named by its alias of the highest weight
    ]
    assert order.routes[1].aliases == (Alias("b", None, 3.0), Alias("a", None, 2.0))
    assert order.routes[0].aliases == (Alias("c", None, 4.0),)
    assert order.insufficient_diversity is False


def test_an_exhausted_shared_pool_is_omitted_once_with_each_alias() -> None:
    specs = [
        RouteSpec("claude", "work", "default", "p", account_multiplier=2.0),
        RouteSpec("glm", "job", "default", "p", runtime_multiplier=1.5),
    ]
    order = capacity_order(specs, [reading("p", 0.0, runtime="claude")], NOW)
    (omitted,) = order.omitted
    assert (omitted.runtime, omitted.account, omitted.label) == ("claude", "work", "exhausted")
    assert omitted.aliases == (Alias("claude", "work", 2.0), Alias("glm", "job", 1.5))
    assert order.routes == [] and order.deferred == []


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


def test_routes_equal_in_priority_and_score_put_more_remaining_first() -> None:
    # both slack 0.6 over an hour of burn, reset in 1 h: a 80 % burning 20 %/h, b 70 % burning
    # 10 %/h; the lowest remaining over each route's windows: a 80, b 70
    readings = [
        reading("a", 100.0, ago=H),
        reading("a", 80.0),
        reading("b", 80.0, ago=H),
        reading("b", 70.0),
    ]
    order = capacity_order([route("b"), route("a")], readings, NOW)
    assert [r.score for r in order.routes] == [pytest.approx(1.6), pytest.approx(1.6)]
    assert [(r.runtime, r.lowest_remaining_percent) for r in order.routes] == [
        ("a", 80.0),
        ("b", 70.0),
    ]


def test_the_remaining_that_breaks_a_tie_is_the_lowest_of_all_the_routes_windows() -> None:
    # a and b: 5h at 60 %, one reading: slack 0.2, the limiting window of both (score 1.2);
    # 7d with zero burn over an hour, reset in 3 h: a 30 % (slack 0.3), b 50 % (slack 0.5).
    # Equal priority, score and limiting remaining: b's lowest window has more left (50 > 30)
    readings = [
        reading("a", 60.0),
        reading("a", 30.0, window="7d", ago=H, reset_in=3 * H),
        reading("a", 30.0, window="7d", reset_in=3 * H),
        reading("b", 60.0),
        reading("b", 50.0, window="7d", ago=H, reset_in=3 * H),
        reading("b", 50.0, window="7d", reset_in=3 * H),
    ]
    order = capacity_order([route("a"), route("b")], readings, NOW)
    assert [(r.runtime, r.limiting_window, r.remaining_percent) for r in order.routes] == [
        ("b", "5h", 60.0),
        ("a", "5h", 60.0),
    ]
    assert [r.priority for r in order.routes] == [pytest.approx(1.2)] * 2
    assert [r.lowest_remaining_percent for r in order.routes] == [50.0, 30.0]


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


def test_reset_credits_multiply_the_priority_by_one_plus_n_over_n_plus_one() -> None:
    assert [credit_factor(n) for n in (0, 1, 2, 3)] == [1.0, 1.5, pytest.approx(5 / 3), 1.75]
    # every route 50 % or 60 % left, one reading: slack 0.0 (score 1.0) or 0.2 (score 1.2)
    readings = [
        reading("a", 50.0, credits=2),  # 1.0 x (1 + 2/3) = 1.6667
        reading("b", 60.0),  # 1.2
        reading("c", 50.0, credits=1),  # 1.0 x 1.5 = 1.5
        reading("d", 50.0, credits=0),  # 1.0: no credit, no factor
    ]
    order = capacity_order([route(n) for n in "abcd"], readings, NOW)
    assert [(r.runtime, r.reset_credits, r.priority) for r in order.routes] == [
        ("a", 2, pytest.approx(5 / 3)),
        ("c", 1, 1.5),
        ("b", 0, pytest.approx(1.2)),
        ("d", 0, 1.0),
    ]
    assert [r.credit_factor for r in order.routes] == [pytest.approx(5 / 3), 1.5, 1.0, 1.0]
    assert all(r.score == 1.0 for r in order.routes if r.runtime != "b")  # the score is not it


def test_the_credits_a_route_has_are_what_its_newest_reading_says() -> None:
    # 5h 80 % (slack 0.6, limiting; said 3 a minute ago), 7d 90 % (said 1 now): n = 1
    readings = [
        reading("a", 80.0, ago=60, credits=3),
        reading("a", 90.0, window="7d", reset_in=48 * H, credits=1),
    ]
    (only,) = capacity_order([route("a")], readings, NOW).routes
    assert (only.reset_credits, only.credit_factor) == (1, 1.5)
    assert only.score == pytest.approx(1.6) and only.priority == pytest.approx(2.4)


def test_each_window_says_what_its_slack_rests_on() -> None:
    readings = [
        # 100 % two hours ago, 80 % now (burn 10 %/h), reset in 3 h: projected 50 -> 0.5
        reading("a", 100.0, ago=2 * H, reset_in=3 * H),
        reading("a", 80.0, reset_in=3 * H),
        # one reading of 90 %: 2 x 0.9 - 1 = 0.8
        reading("a", 90.0, window="7d", reset_in=48 * H),
        # 70 % ten minutes ago, 60 % now: too little time to project; 2 x 0.6 - 1 = 0.2
        reading("a", 70.0, window="1d", ago=600, reset_in=10 * H),
        reading("a", 60.0, window="1d", reset_in=10 * H),
        # no reset time: 2 x 0.4 - 1 = -0.2, the least slack
        reading("a", 40.0, window="30d", reset_in=None),
    ]
    (only,) = capacity_order([route("a")], readings, NOW).routes
    views = {w.window: w for w in only.windows}
    assert {name: w.marker for name, w in views.items()} == {
        "5h": "projected",
        "7d": "warmup",
        "1d": "thin_evidence",
        "30d": "no_reset",
    }
    assert views["5h"].projected_percent == pytest.approx(50.0)
    assert views["5h"].burn_per_hour == pytest.approx(10.0)
    assert views["5h"].evidence_hours == pytest.approx(2.0)
    assert views["5h"].slack == pytest.approx(0.5)
    assert (views["7d"].projected_percent, views["7d"].slack) == (None, pytest.approx(0.8))
    assert views["1d"].evidence_hours == pytest.approx(1 / 6)
    assert views["1d"].burn_per_hour == pytest.approx(60.0)
    assert (views["1d"].projected_percent, views["1d"].slack) == (None, pytest.approx(0.2))
    assert (views["30d"].projected_percent, views["30d"].slack) == (None, pytest.approx(-0.2))
    assert all(w.label is None for w in only.windows)
    assert (only.limiting_window, only.score) == ("30d", pytest.approx(0.8))
    # a projection below zero says the window runs out before its reset: 60 - 30 x 6 = -120,
    # slack clamped to -1
    burning = [reading("b", 90.0, ago=H, reset_in=6 * H), reading("b", 60.0, reset_in=6 * H)]
    (b,) = capacity_order([route("b")], burning, NOW).routes
    assert b.windows[0].projected_percent == pytest.approx(-120.0) and b.slack == -1.0


def test_among_equal_slacks_the_limiting_window_has_a_reset_the_earliest_one() -> None:
    # 80 % everywhere, one reading each: slack 0.6 in every window
    readings = [
        reading("a", 80.0, window="5h", reset_in=2 * H),
        reading("a", 80.0, window="7d", reset_in=H),  # the earliest reset
        reading("a", 80.0, window="1h", reset_in=None),  # first by name, but no reset
    ]
    (only,) = capacity_order([route("a")], readings, NOW).routes
    assert (only.limiting_window, only.reset_at) == ("7d", NOW + H)
    no_reset_first = [reading("b", 80.0, window="1h", reset_in=None), reading("b", 80.0)]
    assert capacity_order([route("b")], no_reset_first, NOW).routes[0].limiting_window == "5h"
    # the route's own lane wins no tie: the account-wide 5h window resets first
    lanes = [
        reading("c", 60.0, window="5h", reset_in=H),
        reading("c", 60.0, window="7d", lane="sonnet", reset_in=5 * 24 * H),
    ]
    (sonnet,) = capacity_order([lane_route("c", "sonnet")], lanes, NOW).routes
    assert (sonnet.limiting_lane, sonnet.limiting_window) == ("default", "5h")
    # equal resets too: key order (lane, window)
    same = [reading("d", 80.0, window="7d"), reading("d", 80.0, window="5h")]
    assert capacity_order([route("d")], same, NOW).routes[0].limiting_window == "5h"


@pytest.mark.parametrize(
    "found,label,reason",
    [
        ([reading("a", 0.0)], "exhausted", "window 5h is exhausted (0 % left)"),
        ([reading("a", 70.0, ago=1000)], "stale_sample", "no fresh reading for window 5h"),
        ([reading("a", 70.0, ago=10, reset_in=-1)], "expired", "no fresh reading for window 5h"),
        ([reading("a", None)], "malformed", "no fresh reading for window 5h"),
        ([reading("a", 70.0, ago=-60)], "malformed", "no fresh reading for window 5h"),
        (
            [reading("a", 80.0, runtime="a"), reading("a", 20.0, runtime="z")],
            "conflict",
            "window 5h: readings conflict",
        ),
    ],
    ids=["exhausted", "stale", "expired", "no-value", "from-the-future", "conflict"],
)
def test_every_set_aside_route_carries_a_label(found, label, reason) -> None:
    order = capacity_order([route("a")], found, NOW)
    (aside,) = order.omitted + order.deferred
    assert (aside.label, aside.reason) == (label, reason)
    assert [w.label for w in aside.windows] == [label]  # the window that sets it aside says so
    assert aside in (order.omitted if label == "exhausted" else order.deferred)


def test_an_account_with_no_reading_of_its_own_is_a_missing_sample() -> None:
    specs = [route("a", "p1"), RouteSpec("a", "spare", "default", "p2")]
    order = capacity_order(specs, [reading("p1", 70.0, runtime="a")], NOW)
    (aside,) = order.deferred
    assert (aside.account, aside.label, aside.reason) == (
        "spare",
        "missing_sample",
        "no reading for lane default",
    )


def test_lanes_of_one_account_are_not_independent_pools() -> None:
    # one account's default 5h (80 %), opus 7d (70 %) and sonnet 7d (60 %): three ranked lanes
    one_account = [
        reading("p", 80.0),
        reading("p", 70.0, window="7d", lane="opus", reset_in=48 * H),
        reading("p", 60.0, window="7d", lane="sonnet", reset_in=48 * H),
    ]
    specs = [lane_route("claude", lane, "p") for lane in ("default", "opus", "sonnet")]
    order = capacity_order(specs, one_account, NOW)
    assert len(order.routes) == 3 and order.insufficient_diversity is True
    other = capacity_order([*specs, route("b")], [*one_account, reading("b", 50.0)], NOW)
    assert len(other.routes) == 4 and other.insufficient_diversity is False


def test_route_auto_weighs_a_pool_by_its_aliases_that_offer_the_model() -> None:
    # pool p: a (weight 3) and b (weight 1); pool q: c (weight 2). 50 % everywhere: score 1.0.
    # capacity_order: p (3.0) before q (2.0); a request only b and c can serve: q (2.0) before
    # p as b sees it (1.0)
    specs = [
        route("a", "p", runtime_multiplier=3.0),
        route("b", "p"),
        route("c", "q", runtime_multiplier=2.0),
    ]
    order = capacity_order(specs, [reading("p", 50.0, runtime="a"), reading("q", 50.0)], NOW)
    assert [(r.runtime, r.priority) for r in order.routes] == [("a", 3.0), ("c", 2.0)]
    assert pick(order, {"a": "m", "b": "m", "c": "m"}, 0.0, {}).runtime == "a"
    chosen = pick(order, {"b": "m", "c": "m"}, 0.0, {})
    assert (chosen.runtime, chosen.weight, chosen.priority) == ("c", 2.0, 2.0)
    only_b = pick(order, {"b": "m"}, 0.0, {})
    assert (only_b.runtime, only_b.weight, only_b.priority) == ("b", 1.0, 1.0)
