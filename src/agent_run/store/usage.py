"""Usage queries: each execution's reported tokens and cost, with its runtime, account, model and
batch; and the sums the spend caps compare (an agent's executions, a batch's, a spend group's).

A running execution's `usage_json` / `cost_usd` are what it reported so far (its supervisor
writes them as the usage arrives), so every sum here counts running executions too."""

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

_EXECUTIONS = (
    "SELECT e.id, a.runtime, a.model, e.account, e.created_at, e.ended_at, e.usage_json, e.cost_usd,"
    " e.cost_source, (SELECT r.batch_id FROM batch_attempts t JOIN batch_runs r ON r.id = t.run_id"
    "  WHERE t.agent_id = a.id LIMIT 1) AS batch_id"
    " FROM executions e JOIN agents a ON a.id = e.agent_id"
)


@dataclass(frozen=True)
class Spend:
    """Reported input + output tokens and cost (None: no execution reported or priced one)."""

    tokens: int = 0
    cost_usd: float | None = None

    def __add__(self, other: "Spend") -> "Spend":
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Spend(self.tokens + other.tokens, sum(costs) if costs else None)


def tokens_of(usage: dict[str, float]) -> int:
    """The tokens a cap counts: input + output, as the engine reported them."""
    return int((usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0))


def _spend(rows: Iterable[sqlite3.Row]) -> Spend:
    total = Spend()
    for row in rows:
        usage = json.loads(row["usage_json"]) if row["usage_json"] else {}
        total += Spend(tokens_of(usage), row["cost_usd"])
    return total


def execution_usage(
    conn: sqlite3.Connection, *, runtime: str | None, since: float | None
) -> list[sqlite3.Row]:
    """Every execution (oldest first) with what it reported, filtered by runtime and creation time."""
    where: list[str] = []
    params: list[str | float] = []
    if runtime is not None:
        where.append("a.runtime = ?")
        params.append(runtime)
    if since is not None:
        where.append("e.created_at >= ?")
        params.append(since)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return conn.execute(f"{_EXECUTIONS}{clause} ORDER BY e.created_at, e.id", params).fetchall()


_BATCH_EXECUTIONS = (
    "SELECT e.id, e.agent_id, e.usage_json, e.cost_usd, e.cost_source FROM executions e"
    " WHERE e.spend_group = :batch OR e.agent_id IN (SELECT t.agent_id FROM batch_attempts t"
    " JOIN batch_runs r ON r.id = t.run_id WHERE r.batch_id = :batch)"
)


def batch_executions(conn: sqlite3.Connection, batch_id: str) -> list[sqlite3.Row]:
    """Every execution of a batch's agents: those sharing its spend group, and those of every
    agent a run of it has had (runs of batches older than spend groups included)."""
    return conn.execute(
        _BATCH_EXECUTIONS + " ORDER BY e.created_at", {"batch": batch_id}
    ).fetchall()


def run_executions(conn: sqlite3.Connection, run_id: str) -> list[sqlite3.Row]:
    """Every execution of every agent a batch run has had (each attempt's, and its current)."""
    return conn.execute(
        "SELECT e.id, e.usage_json, e.cost_usd, e.cost_source, e.started_at, e.ended_at"
        " FROM executions e"
        " WHERE e.agent_id IN (SELECT agent_id FROM batch_attempts WHERE run_id = :run"
        " UNION SELECT agent_id FROM batch_runs WHERE id = :run AND agent_id IS NOT NULL)"
        " ORDER BY e.created_at",
        {"run": run_id},
    ).fetchall()


def batch_spend(conn: sqlite3.Connection, batch_id: str) -> tuple[int, float | None]:
    """A batch's reported input + output tokens and cost (None: no run reported a cost) so far,
    its running runs included."""
    spent = _spend(batch_executions(conn, batch_id))
    return spent.tokens, spent.cost_usd


def agent_spend(conn: sqlite3.Connection, agent_id: str, *, besides: str) -> Spend:
    """What an agent's executions other than `besides` reported: a cap counts the whole agent."""
    rows = conn.execute(
        "SELECT usage_json, cost_usd FROM executions WHERE agent_id = ? AND id != ?",
        (agent_id, besides),
    ).fetchall()
    return _spend(rows)


def group_spend(conn: sqlite3.Connection, group: str, *, besides: str) -> Spend:
    """What the executions of a spend group other than `besides` reported so far."""
    rows = conn.execute(
        "SELECT usage_json, cost_usd FROM executions WHERE spend_group = ? AND id != ?",
        (group, besides),
    ).fetchall()
    return _spend(rows)
