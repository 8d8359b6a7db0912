"""Spend caps, checked each time the engine reports usage (mid-turn too, where its stream says
it: Codex `thread/tokenUsage/updated`, a stream-json engine's per-message usage) and at each
turn's completion.

Two caps can apply. The execution's own `max_tokens` / `max_cost_usd` count its whole agent:
the usage its earlier executions reported (a resume's) plus this one's so far. A batch run's
execution also shares its batch's caps (its spend group): the group's total is what the other
executions of the group last wrote to their rows plus this one's so far. Passing either stops
the run: it ends `failed` / `budget_exceeded`. A cost cap acts only on a known cost: the
engine's, or the user's price table's (`[prices]`); Codex reports none.
"""

import json
from dataclasses import dataclass
from typing import Any

from agent_run.store.usage import Spend, tokens_of


@dataclass(frozen=True)
class Prices:
    """USD per million input / output tokens (`[prices]`), for an engine that reports no cost."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, usage: dict[str, float]) -> float:
        return (
            (usage.get("input_tokens") or 0) * self.input_per_mtok
            + (usage.get("output_tokens") or 0) * self.output_per_mtok
        ) / 1_000_000


@dataclass(frozen=True)
class Budget:
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    group: str | None = None  # the batch whose caps this execution shares
    group_max_tokens: int | None = None
    group_max_cost_usd: float | None = None
    earlier: Spend = Spend()  # what the agent's earlier executions reported

    @classmethod
    def of_execution(cls, row: Any, earlier: Spend) -> "Budget":
        keys = row.keys()

        def get(name: str) -> Any:
            return row[name] if name in keys else None

        return cls(
            get("max_tokens"),
            get("max_cost_usd"),
            get("spend_group"),
            get("spend_group_max_tokens"),
            get("spend_group_max_cost_usd"),
            earlier,
        )

    def exceeded(self, own: Spend, others: Spend | None = None) -> str | None:
        """Why the run must stop, or None while it is within its caps. `own` is this
        execution's spend so far; `others` the rest of its spend group's."""
        agent = self.earlier + own
        if self.max_tokens is not None and agent.tokens > self.max_tokens:
            whose = " (with its agent's earlier executions)" if self.earlier.tokens else ""
            return (
                f"reported usage {agent.tokens} tokens{whose} passed max_tokens {self.max_tokens}"
            )
        if _over(agent.cost_usd, self.max_cost_usd):
            return (
                f"reported cost ${agent.cost_usd:.4f} passed max_cost_usd ${self.max_cost_usd:.4f}"
            )
        if self.group is None:
            return None
        batch = own + (others or Spend())
        if self.group_max_tokens is not None and batch.tokens > self.group_max_tokens:
            return (
                f"the batch's reported usage {batch.tokens} tokens passed its max_tokens "
                f"{self.group_max_tokens}"
            )
        if _over(batch.cost_usd, self.group_max_cost_usd):
            return (
                f"the batch's reported cost ${batch.cost_usd:.4f} passed its max_cost_usd "
                f"${self.group_max_cost_usd:.4f}"
            )
        return None


def _over(cost: float | None, cap: float | None) -> bool:
    return cost is not None and cap is not None and cost > cap


def spend_of(usage: dict[str, float], cost_usd: float | None) -> Spend:
    return Spend(tokens_of(usage), cost_usd)


class SpendMeter:
    """An execution's usage as its engine reports it: the completed turns' sum plus the
    running turn's so far, and its cost (the engine's, else priced by `[prices]`, else None:
    never invented)."""

    def __init__(self, prices: Prices | None) -> None:
        self.prices = prices
        self.completed: dict[str, float] = {}
        self.turn: dict[str, float] = {}
        self.engine_cost: float | None = None
        self.changed = False  # since the row last had it

    def turn_so_far(self, usage: dict[str, float]) -> None:
        self.turn = {k: v for k, v in usage.items() if isinstance(v, (int, float))}
        self.changed = True

    def turn_completed(self, usage: dict[str, Any] | None, cost_usd: float | None) -> None:
        """The turn's final usage (else the last reported so far) joins the completed sum."""
        final = usage if usage else self.turn
        for key, value in final.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.completed[key] = self.completed.get(key, 0) + value
        if cost_usd is not None:
            self.engine_cost = (self.engine_cost or 0.0) + cost_usd
        self.turn = {}
        self.changed = True

    @property
    def usage(self) -> dict[str, float]:
        total = dict(self.completed)
        for key, value in self.turn.items():
            total[key] = total.get(key, 0) + value
        return total

    @property
    def cost_source(self) -> str | None:
        if self.engine_cost is not None:
            return "engine"
        return "price_table" if self.prices is not None else None

    @property
    def cost_usd(self) -> float | None:
        if self.engine_cost is not None:
            return self.engine_cost
        return self.prices.cost(self.usage) if self.prices is not None else None

    def spend(self) -> Spend:
        return spend_of(self.usage, self.cost_usd)

    def row_fields(self) -> dict[str, Any]:
        """usage_json / cost_usd / cost_source as they stand (empty before any usage)."""
        usage = self.usage
        if not usage and self.cost_usd is None:
            return {}
        fields: dict[str, Any] = {"usage_json": json.dumps(usage)}
        if self.cost_usd is not None:
            fields.update(cost_usd=self.cost_usd, cost_source=self.cost_source)
        return fields
