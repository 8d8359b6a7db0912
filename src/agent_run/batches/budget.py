"""A batch's spend caps (`max_tokens`, `max_cost_usd` over all its runs, running ones included:
their supervisors write their usage as it arrives).

At its cap a batch starts no new run (the run fails saying why, and so does the batch's
`state_reason`). Below it, each new attempt gets what is left as its own caps, committed with
the attempt number (`batch_runs.attempt_max_tokens` / `attempt_max_cost_usd`), so a restarted
daemon repeats the same start request; and every agent of the batch shares the batch's caps as
its spend group, so its supervisor stops it once the batch's total passes one, however many
run at once (supervisor/budget.py)."""

from typing import Any

from agent_run.services.agents import SpendGroup


def batch_caps(
    cfg: dict[str, Any], spent_tokens: int, spent_cost: float | None
) -> tuple[str | None, dict[str, Any]]:
    """(why no new run may start, or None; the caps of the next attempt: what is left)."""
    max_tokens, max_cost = cfg.get("max_tokens"), cfg.get("max_cost_usd")
    if max_tokens is not None and spent_tokens >= max_tokens:
        return (
            f"budget: the batch reached its max_tokens ({spent_tokens} of {max_tokens} tokens reported)",
            {},
        )
    if max_cost is not None and spent_cost is not None and spent_cost >= max_cost:
        return (
            f"budget: the batch reached its max_cost_usd (${spent_cost:.4f} of ${max_cost:.4f} reported)",
            {},
        )
    return None, {
        "max_tokens": None if max_tokens is None else max_tokens - spent_tokens,
        "max_cost_usd": None if max_cost is None else max_cost - (spent_cost or 0.0),
    }


def spend_group(batch_id: str, cfg: dict[str, Any]) -> SpendGroup | None:
    """The caps every agent of the batch shares, or None when it has none."""
    if cfg.get("max_tokens") is None and cfg.get("max_cost_usd") is None:
        return None
    return SpendGroup(batch_id, cfg.get("max_tokens"), cfg.get("max_cost_usd"))
