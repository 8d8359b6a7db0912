"""The `usage` tool: tokens and cost by runtime / account / model / day / batch, as the engines reported them.

Tokens are the engines' own `input_tokens` and `output_tokens` (summed per execution by the
supervisor, written as they arrive: a running execution counts with what it reported so far);
cost is the engine's reported cost, else the user's `[prices]` entry applied to the tokens,
summed only over executions that have one, and null for a group where none does: never a price
agent-run made up.
"""

import json
import sqlite3
import time
from dataclasses import dataclass, field

from agent_run.domain.account_models import UsageParams, UsageResult, UsageRow
from agent_run.services.context import ServiceContext
from agent_run.store.usage import execution_usage


@dataclass
class _Sum:
    executions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    costed: int = 0
    key: dict[str, str | None] = field(default_factory=dict)

    def add(self, row: sqlite3.Row) -> None:
        usage = json.loads(row["usage_json"]) if row["usage_json"] else {}
        self.executions += 1
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)
        if row["cost_usd"] is not None:
            self.cost += row["cost_usd"]
            self.costed += 1

    def view(self) -> UsageRow:
        return UsageRow(
            key=self.key,
            executions=self.executions,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
            cost_usd=round(self.cost, 6) if self.costed else None,
            cost_reported_by=self.costed,
        )


def _key(row: sqlite3.Row, by: list[str]) -> dict[str, str | None]:
    values = {
        "runtime": row["runtime"],
        "account": row["account"],
        "model": row["model"],
        "batch": row["batch_id"],
        "day": time.strftime("%Y-%m-%d", time.gmtime(row["ended_at"] or row["created_at"])),
    }
    return {name: values[name] for name in by}


def summarize(rows: list[sqlite3.Row], p: UsageParams) -> UsageResult:
    groups: dict[str, _Sum] = {}
    total = _Sum()
    for row in rows:
        if p.batch_id is not None and row["batch_id"] != p.batch_id:
            continue
        key = _key(row, list(p.by))
        group = groups.setdefault(json.dumps(key, sort_keys=True), _Sum(key=key))
        group.add(row)
        total.add(row)
    ordered = sorted(groups.values(), key=lambda g: [str(v) for v in g.key.values()])
    return UsageResult(rows=[g.view() for g in ordered], total=total.view())


async def usage(ctx: ServiceContext, p: UsageParams) -> UsageResult:
    rows = await ctx.db(execution_usage, runtime=p.runtime, since=p.since)
    return summarize(rows, p)
