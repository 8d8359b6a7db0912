"""A batch's spend caps (`max_tokens`, `max_cost_usd` over all its runs): at its cap a batch
starts no new run (the run fails saying why); below it, each agent gets the batch's caps as its
own, so no single run passes them. (The whole cap, not what is left: an agent's start request
must be the same when a restarted daemon repeats it, or its request_id would conflict.)"""

from typing import Any


def batch_caps(
    cfg: dict[str, Any], spent_tokens: int, spent_cost: float | None
) -> tuple[str | None, dict[str, Any]]:
    """(why no new run may start, or None; the caps of the next agent)."""
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
    return None, {"max_tokens": max_tokens, "max_cost_usd": max_cost}
