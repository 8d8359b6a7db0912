"""Spend caps: an execution's `max_tokens` / `max_cost_usd`, checked as its engine reports usage.

Usage arrives with each turn's completion (the engines' own `input_tokens` + `output_tokens`,
and the cost when the engine reports one). A cap passed stops the run: it ends `failed` /
`budget_exceeded`. A cost cap has no effect on an engine that reports no cost (Codex).
"""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Budget:
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    @classmethod
    def of_execution(cls, row: Any) -> "Budget":
        keys = row.keys()
        return cls(
            row["max_tokens"] if "max_tokens" in keys else None,
            row["max_cost_usd"] if "max_cost_usd" in keys else None,
        )

    def exceeded(self, usage: dict[str, float], cost_usd: float | None) -> str | None:
        """Why the run must stop, or None while it is within its caps."""
        tokens = int(usage.get("input_tokens", 0) + usage.get("output_tokens", 0))
        if self.max_tokens is not None and tokens > self.max_tokens:
            return f"reported usage {tokens} tokens passed max_tokens {self.max_tokens}"
        if self.max_cost_usd is not None and cost_usd is not None and cost_usd > self.max_cost_usd:
            return f"reported cost ${cost_usd:.4f} passed max_cost_usd ${self.max_cost_usd:.4f}"
        return None
