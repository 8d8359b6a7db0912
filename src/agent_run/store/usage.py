"""Usage queries: each execution's reported tokens and cost, with its runtime, account, model and batch."""

import json
import sqlite3

_EXECUTIONS = (
    "SELECT e.id, a.runtime, a.model, e.account, e.created_at, e.ended_at, e.usage_json, e.cost_usd,"
    " (SELECT r.batch_id FROM batch_attempts t JOIN batch_runs r ON r.id = t.run_id"
    "  WHERE t.agent_id = a.id LIMIT 1) AS batch_id"
    " FROM executions e JOIN agents a ON a.id = e.agent_id"
)


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


def batch_spend(conn: sqlite3.Connection, batch_id: str) -> tuple[int, float | None]:
    """A batch's reported input + output tokens and cost (None: no run reported a cost) so far."""
    rows = conn.execute(
        "SELECT DISTINCT e.id, e.usage_json, e.cost_usd FROM executions e"
        " JOIN batch_attempts t ON t.agent_id = e.agent_id JOIN batch_runs r ON r.id = t.run_id"
        " WHERE r.batch_id = ?",
        (batch_id,),
    ).fetchall()
    tokens, cost = 0, None
    for row in rows:
        usage = json.loads(row["usage_json"]) if row["usage_json"] else {}
        tokens += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
        if row["cost_usd"] is not None:
            cost = (cost or 0.0) + row["cost_usd"]
    return tokens, cost
