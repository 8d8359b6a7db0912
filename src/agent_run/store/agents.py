"""Queries on `agents` (written once, by the daemon, at admission) and their executions.

An agent's task is stored once: it is the `prompt` of its execution number 1 (every execution
keeps the input it was started with). Agent rows read here carry it as `task`."""

import json
import sqlite3
import time
from typing import Any

from agent_run.domain.states import TERMINAL_STATES, ExecutionState, check_transition
from agent_run.store.db import one, sql_list
from agent_run.store.events import append_event

TERMINAL_SQL = sql_list(TERMINAL_STATES)
# The agent's task, for a query on `agents a`: its first execution's input.
TASK_SQL = "(SELECT prompt FROM executions WHERE agent_id = a.id AND number = 1) AS task"


def insert_agent_with_execution(
    conn: sqlite3.Connection, *, agent: dict[str, Any], execution: dict[str, Any]
) -> None:
    """Admission: the agent row, its first execution (`created`, its `prompt` the agent's task)
    and a `created` event."""
    now = time.time()
    conn.execute(
        "INSERT INTO agents (id, request_id, request_hash, runtime, engine, model, workdir,"
        " profile, created_at) VALUES (:id, :request_id, :request_hash, :runtime, :engine, :model,"
        " :workdir, :profile, :created_at)",
        {**agent, "created_at": now},
    )
    insert_execution(conn, agent_id=agent["id"], execution=execution)


def insert_execution(conn: sqlite3.Connection, *, agent_id: str, execution: dict[str, Any]) -> None:
    now = time.time()
    number = conn.execute(
        "SELECT coalesce(max(number), 0) + 1 FROM executions WHERE agent_id = ?", (agent_id,)
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO executions (id, agent_id, number, kind, prompt, state, plan_json, created_at,"
        " updated_at, account, max_tokens, max_cost_usd, route, route_reason, spend_group,"
        " spend_group_max_tokens, spend_group_max_cost_usd, price_input_per_mtok,"
        " price_output_per_mtok)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            execution["id"],
            agent_id,
            number,
            execution["kind"],
            execution["prompt"],
            ExecutionState.CREATED.value,
            json.dumps(execution["plan"]),
            now,
            now,
            execution.get("account"),
            execution.get("max_tokens"),
            execution.get("max_cost_usd"),
            execution.get("route"),
            execution.get("route_reason"),
            execution.get("spend_group"),
            execution.get("spend_group_max_tokens"),
            execution.get("spend_group_max_cost_usd"),
            execution.get("price_input_per_mtok"),
            execution.get("price_output_per_mtok"),
        ),
    )
    append_event(
        conn,
        agent_id=agent_id,
        execution_id=execution["id"],
        kind="state",
        data={"state": ExecutionState.CREATED.value, "number": number},
    )


def get_agent(conn: sqlite3.Connection, agent_id: str) -> sqlite3.Row | None:
    """The agent's row, with its `task`."""
    return one(conn, f"SELECT a.*, {TASK_SQL} FROM agents a WHERE a.id = ?", (agent_id,))


def get_agent_by_request(conn: sqlite3.Connection, request_id: str) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM agents WHERE request_id = ?", (request_id,))


def get_execution(conn: sqlite3.Connection, execution_id: str) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM executions WHERE id = ?", (execution_id,))


def latest_execution(conn: sqlite3.Connection, agent_id: str) -> sqlite3.Row | None:
    return one(
        conn,
        "SELECT * FROM executions WHERE agent_id = ? ORDER BY number DESC LIMIT 1",
        (agent_id,),
    )


def latest_state_and_revision(conn: sqlite3.Connection, agent_id: str) -> tuple[str | None, int]:
    """The state of the agent's latest execution and the store's revision, from one statement's
    snapshot ((None, 0): no such agent). A parked `wait` looks at this alone each time the
    revision moves."""
    row = one(
        conn,
        "SELECT state, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)"
        " AS revision FROM executions WHERE agent_id = ? ORDER BY number DESC LIMIT 1",
        (agent_id,),
    )
    return (row["state"], row["revision"]) if row else (None, 0)


def latest_executions(conn: sqlite3.Connection, agent_ids: list[str]) -> dict[str, sqlite3.Row]:
    """Each agent's latest execution, by agent id, in one query."""
    if not agent_ids:
        return {}
    marks = ",".join("?" * len(agent_ids))
    rows = conn.execute(
        f"SELECT e.* FROM executions e WHERE e.agent_id IN ({marks}) AND e.number ="
        " (SELECT max(number) FROM executions WHERE agent_id = e.agent_id)",
        agent_ids,
    ).fetchall()
    return {r["agent_id"]: r for r in rows}


def live_executions(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(
        f"SELECT * FROM executions WHERE state NOT IN {TERMINAL_SQL} ORDER BY created_at"
    ).fetchall()


_LIST_BASE = (
    "FROM agents a JOIN executions e ON e.agent_id = a.id"
    " AND e.number = (SELECT max(number) FROM executions WHERE agent_id = a.id)"
)


# A batch run's agent: admitted with the scheduler's request id (in its admission transaction),
# or attached to a run's attempt.
BATCH_AGENT_SQL = (
    "(coalesce(a.request_id, '') GLOB 'rn_*-a[0-9]*'"
    " OR a.id IN (SELECT agent_id FROM batch_attempts))"
)


def list_agents(
    conn: sqlite3.Connection,
    *,
    states: list[str] | None,
    runtime: str | None,
    after_revision: int | None,
    limit: int,
    offset: int,
    standalone: bool | None = None,
    verdict: str | None = None,
) -> tuple[list[sqlite3.Row], int]:
    """A page of agents (newest first, each with its `task`) with their latest execution, and the
    exact total."""
    where: list[str] = []
    params: list[Any] = []
    if standalone is not None:
        where.append(f"NOT {BATCH_AGENT_SQL}" if standalone else BATCH_AGENT_SQL)
    if verdict is not None:
        where.append("e.verdict = ?")
        params.append(verdict)
    if after_revision is not None:
        where.append("a.id IN (SELECT agent_id FROM events WHERE seq > ?)")
        params.append(after_revision)
    if states:
        where.append(f"e.state IN ({','.join('?' * len(states))})")
        params += states
    if runtime:
        where.append("a.runtime = ?")
        params.append(runtime)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = conn.execute(f"SELECT count(*) {_LIST_BASE}{clause}", params).fetchone()[0]
    rows = conn.execute(
        f"SELECT a.*, {TASK_SQL}, e.id AS execution_id, e.state, e.failure_kind, e.number, e.updated_at,"
        f" e.answer_sha256, e.integrity_failed_at, e.ended_at, e.verdict, e.account, e.route,"
        f" json_extract(e.plan_json, '$.runtime_config.sandbox') AS sandbox {_LIST_BASE}{clause}"
        f" ORDER BY a.created_at DESC, a.id DESC LIMIT ? OFFSET ?",
        [*params, limit, offset],
    ).fetchall()
    return rows, total


def transition(
    conn: sqlite3.Connection,
    execution_id: str,
    new: ExecutionState,
    event_extra: dict[str, Any] | None = None,
    **fields: Any,
) -> ExecutionState:
    """Move an execution to `new` (checked against the lifecycle), set fields, log a `state` event
    (with `event_extra` in its data: a mirrored host event's `remote_seq`).

    Call inside a write transaction. Returns the previous state.
    """
    row = conn.execute(
        "SELECT agent_id, state FROM executions WHERE id = ?", (execution_id,)
    ).fetchone()
    old = ExecutionState(row["state"])
    check_transition(old, new)
    now = time.time()
    fields = {**fields, "state": new.value, "updated_at": now}
    if new.terminal:
        fields.setdefault("ended_at", now)
    assignments = ", ".join(f"{name} = :{name}" for name in fields)
    conn.execute(
        f"UPDATE executions SET {assignments} WHERE id = :id", {**fields, "id": execution_id}
    )
    event: dict[str, Any] = {"state": new.value, "from": old.value}
    if fields.get("failure_kind"):
        event["failure_kind"] = fields["failure_kind"]
    event.update(event_extra or {})
    append_event(
        conn, agent_id=row["agent_id"], execution_id=execution_id, kind="state", data=event
    )
    return old


def update_execution(conn: sqlite3.Connection, execution_id: str, **fields: Any) -> None:
    """Set non-state fields (identity, session id, usage). Call inside a write transaction."""
    fields = {**fields, "updated_at": time.time()}
    assignments = ", ".join(f"{name} = :{name}" for name in fields)
    conn.execute(
        f"UPDATE executions SET {assignments} WHERE id = :id", {**fields, "id": execution_id}
    )
