"""Text renderers of the capacity results, `limits`, `capacity order` and `capacity collect`
(docs/capacity.md; registered in `text.render.RENDERERS`)."""

from collections.abc import Callable
from typing import Any


def _pct(value: Any) -> str:
    return "    ?" if value is None else f"{value:4.0f}%"


def _basis(w: Any) -> str:
    """What a window's slack rests on, in words (its marker)."""
    if w.marker == "projected":
        return f"projected {w.projected_percent:.0f}% at reset"
    if w.marker == "thin_evidence":
        return f"thin evidence ({w.evidence_hours:.1f} h of readings)"
    return {"warmup": "warmup (one reading)", "no_reset": "no reset time"}.get(w.marker, "")


def _slack(w: Any) -> str:
    if w.slack is None:
        return "stale"
    return f"slack {w.slack:+.2f} {_basis(w)}".rstrip()


def limits(result: Any) -> str:
    rows = [
        f"{w.runtime}{'/' + w.account if w.account else ''}  {w.lane}  {w.window:<4} {_pct(w.remaining_percent)}"
        f"  {w.risk:<7} {w.advice}  [{_slack(w)}"
        + (f", {w.reset_credits} reset credit(s)" if w.reset_credits else "")
        + "]"
        for w in result.windows
    ]
    return "\n".join(rows or ["no readings yet: `agent-run capacity collect`, or run an agent"])


def _limiting(r: Any) -> str:
    """The limiting window, with its lane when it is the account-wide one of a lane route."""
    if r.limiting_lane == r.lane:
        return str(r.limiting_window)
    return f"{r.limiting_lane}/{r.limiting_window}"


def _who(runtime: str, account: str | None) -> str:
    return f"{runtime}/{account}" if account else runtime


def _aliases(route: Any) -> list[str]:
    """The other (runtime, account)s spending the route's credential pool, when there are any."""
    if len(route.aliases) < 2:
        return []
    named = ", ".join(f"{_who(a.runtime, a.account)} (weight {a.weight:g})" for a in route.aliases)
    return [f"   aliases (one pool): {named}"]


def _window_rows(route: Any) -> list[str]:
    rows = []
    for w in route.windows:
        name = w.window if w.lane == route.lane else f"{w.lane}/{w.window}"
        rows.append(f"   {name:<10} {_pct(w.remaining_percent)}  {_slack(w)}")
    return rows


def _ranked(n: int, r: Any) -> list[str]:
    credits = f" x credits {r.credit_factor:.2f}" if r.reset_credits else ""
    head = (
        f"{n}. {_who(r.runtime, r.account)}  {r.lane}  priority {r.priority:.2f}"
        f"  (score {r.score:.2f} x weight {r.weight:g}{credits}; {_limiting(r)} "
        f"{_pct(r.remaining_percent).strip()})"
    )
    extra = [f"   {r.reset_credits} reset credit(s): priority x {r.credit_factor:.2f}"]
    return [head, *_window_rows(r), *_aliases(r), *(extra if r.reset_credits else [])]


def capacity_order(result: Any) -> str:
    rows = [line for n, r in enumerate(result.routes, 1) for line in _ranked(n, r)]
    for kind, items in (("omitted ", result.omitted), ("deferred", result.deferred)):
        for a in items:
            rows.append(f"{kind} {_who(a.runtime, a.account)}  {a.lane}  [{a.label}] {a.reason}")
            rows += _aliases(a)
    rows += [f"unusable {u.runtime}: {u.reason}" for u in result.unusable_runtimes]
    rows += [f"unavailable {name}: no reading" for name in result.unavailable_runtimes]
    if result.insufficient_diversity:
        rows.append(
            "insufficient diversity: fewer than two independent credential pools can take new work"
        )
    return "\n".join(rows)


def collect_result(result: Any) -> str:
    return (
        "\n".join(
            f"{s.runtime}  {s.source}: "
            + (f"{s.windows} window(s)" if s.error is None else f"no evidence ({s.error})")
            for s in result.sources
        )
        or "no runtime has a command or codex_appserver source"
    )


RENDERERS: dict[str, Callable[[Any], str]] = {
    "LimitsResult": limits,
    "CapacityOrderResult": capacity_order,
    "CollectResult": collect_result,
}
