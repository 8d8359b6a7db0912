"""Usage queries: each execution's reported tokens and cost, with its runtime, account, model and batch."""

import sqlite3

_EXECUTIONS = (
    "SELECT e.id, a.runtime, a.model, e.account, e.created_at, e.ended_at, e.usage_json, e.cost_usd,"
    " (SELECT r.batch_id FROM batch_attempts t JOIN batch_runs r ON r.id = t.run_id"
    "  WHERE t.agent_id = a.id LIMIT 1) AS batch_id"
    " FROM executions e JOIN agents a ON a.id = e.agent_id"
)


def execution_usage(conn: sqlite3.Connection, *, runtime: str | None, since: float | None) -> list[sqlite3.Row]:
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
