"""Retention in the store: the terminal agents due for pruning, and their rows deleted in one
transaction (re-checked under the write lock, so an agent resumed meanwhile is left alone)."""

import sqlite3
from dataclasses import dataclass

from agent_run.store.agents import TERMINAL_SQL
from agent_run.store.batches import ENDED_BATCH_SQL
from agent_run.store.db import write

# An agent's rows besides `agents` and `executions`, all keyed by agent_id.
ACTIVITY_TABLES = ("events", "messages", "commands", "tool_reports", "provider_signals")
# Its completion notices and their target go with its activity: the target too, or the notices
# of executions that ended would be made (and sent) again.
_NOTICES_OF = "SELECT id FROM notify_targets WHERE agent_id = ?"


# Agents whose every execution is terminal, the last ended before ?, that no live batch holds
# (a batch not ended may rerun, resume or follow up any of its agents).
_DUE_SQL = f"""
SELECT e.agent_id AS agent_id, MAX(COALESCE(e.ended_at, e.updated_at)) AS ended_at
FROM executions e
GROUP BY e.agent_id
HAVING SUM(e.state NOT IN {TERMINAL_SQL}) = 0 AND MAX(COALESCE(e.ended_at, e.updated_at)) <= ?
   AND e.agent_id NOT IN (
       SELECT a.agent_id FROM batch_attempts a
       JOIN batch_runs r ON r.id = a.run_id JOIN batches b ON b.id = r.batch_id
       WHERE b.state NOT IN {ENDED_BATCH_SQL}
       UNION
       SELECT r.agent_id FROM batch_runs r JOIN batches b ON b.id = r.batch_id
       WHERE r.agent_id IS NOT NULL AND b.state NOT IN {ENDED_BATCH_SQL})
ORDER BY ended_at
"""


@dataclass(frozen=True)
class DueExecution:
    id: str
    runtime: str
    plan_json: str
    sealed: bool  # it has a sealed answer (answer.md + answer.json)


@dataclass(frozen=True)
class DueAgent:
    agent_id: str
    ended_at: float
    in_batch: bool  # some batch (ended) names it: its agent and execution rows stay
    executions: list[DueExecution]
    activity_rows: int  # rows of ACTIVITY_TABLES, its notices and its notify target

    @property
    def sealed(self) -> bool:
        return any(execution.sealed for execution in self.executions)


def due_agents(conn: sqlite3.Connection, ended_before: float) -> list[DueAgent]:
    """The agents retention may act on: terminal, ended before `ended_before`, no live batch."""
    due = []
    for row in conn.execute(_DUE_SQL, (ended_before,)).fetchall():
        agent_id = row["agent_id"]
        executions = [
            DueExecution(e["id"], e["runtime"], e["plan_json"], e["answer_sha256"] is not None)
            for e in conn.execute(
                "SELECT e.id, a.runtime, e.plan_json, e.answer_sha256 FROM executions e"
                " JOIN agents a ON a.id = e.agent_id WHERE e.agent_id = ? ORDER BY e.number",
                (agent_id,),
            )
        ]
        in_batch = (
            conn.execute(
                "SELECT 1 FROM batch_attempts WHERE agent_id = ?"
                " UNION SELECT 1 FROM batch_runs WHERE agent_id = ?",
                (agent_id, agent_id),
            ).fetchone()
            is not None
        )
        rows = sum(
            conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE agent_id = ?", (agent_id,)
            ).fetchone()[0]
            for table in ACTIVITY_TABLES
        )
        rows += conn.execute(
            f"SELECT (SELECT COUNT(*) FROM notices WHERE target_id IN ({_NOTICES_OF}))"
            " + (SELECT COUNT(*) FROM notify_targets WHERE agent_id = ?)",
            (agent_id, agent_id),
        ).fetchone()[0]
        due.append(DueAgent(agent_id, row["ended_at"], in_batch, executions, rows))
    return due


def delete_agent_rows(
    conn: sqlite3.Connection, ended_before: float, plan: dict[str, str]
) -> dict[str, int]:
    """In one transaction: for each agent id of `plan` that is still due, delete its rows as
    planned: "whole" (activity, executions, the agent), "activity" (ACTIVITY_TABLES, notices and
    notify target) or "none".
    Returns rows deleted per agent still due; one no longer due (resumed meanwhile) is left out."""
    deleted: dict[str, int] = {}
    with write(conn, "the pruning of old agents"):
        still_due = {row["agent_id"] for row in conn.execute(_DUE_SQL, (ended_before,))}
        for agent_id, rows in plan.items():
            if agent_id not in still_due:
                continue
            count = 0
            for table in ACTIVITY_TABLES if rows != "none" else ():
                count += conn.execute(
                    f"DELETE FROM {table} WHERE agent_id = ?", (agent_id,)
                ).rowcount
            if rows != "none":
                count += conn.execute(
                    f"DELETE FROM notices WHERE target_id IN ({_NOTICES_OF})", (agent_id,)
                ).rowcount
                count += conn.execute(
                    "DELETE FROM notify_targets WHERE agent_id = ?", (agent_id,)
                ).rowcount
            if rows == "whole":
                count += conn.execute(
                    "DELETE FROM executions WHERE agent_id = ?", (agent_id,)
                ).rowcount
                count += conn.execute("DELETE FROM agents WHERE id = ?", (agent_id,)).rowcount
            deleted[agent_id] = count
    return deleted
