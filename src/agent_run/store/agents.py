"""Queries on `agents` (written once, by the daemon, at admission) and their executions."""

import json
import sqlite3
import time
from typing import Any

from agent_run.domain.states import TERMINAL_STATES, ExecutionState, check_transition
from agent_run.store.db import one
from agent_run.store.events import append_event

TERMINAL_SQL = "(" + ", ".join(f"'{state.value}'" for state in sorted(TERMINAL_STATES)) + ")"


def insert_agent_with_execution(
    conn: sqlite3.Connection, *, agent: dict[str, Any], execution: dict[str, Any]
) -> None:
    """Admission: the agent row, its first execution (`created`) and a `created` event."""
    now = time.time()
    conn.execute(
        "INSERT INTO agents (id, request_id, request_hash, runtime, engine, model, task, workdir,"
        " profile, created_at) VALUES (:id, :request_id, :request_hash, :runtime, :engine, :model,"
        " :task, :workdir, :profile, :created_at)",
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
        " updated_at, account, max_tokens, max_cost_usd) VALUES (?, ?, ?, ?, ?, 'created', ?, ?, ?, ?, ?, ?)",
        (
            execution["id"],
            agent_id,
            number,
            execution["kind"],
            execution["prompt"],
            json.dumps(execution["plan"]),
            now,
            now,
            execution.get("account"),
            execution.get("max_tokens"),
            execution.get("max_cost_usd"),
        ),
    )
    append_event(
        conn,
        agent_id=agent_id,
        execution_id=execution["id"],
        kind="state",
        data={"state": "created", "number": number},
    )


def get_agent(conn: sqlite3.Connection, agent_id: str) -> sqlite3.Row | None:
    return one(conn, "SELECT * FROM agents WHERE id = ?", (agent_id,))


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


def live_executions(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    return conn.execute(
        f"SELECT * FROM executions WHERE state NOT IN {TERMINAL_SQL} ORDER BY created_at"
    ).fetchall()


_LIST_BASE = (
    "FROM agents a JOIN executions e ON e.agent_id = a.id"
    " AND e.number = (SELECT max(number) FROM executions WHERE agent_id = a.id)"
)


def list_agents(
    conn: sqlite3.Connection,
    *,
    states: list[str] | None,
    runtime: str | None,
    after_revision: int | None,
    limit: int,
    offset: int,
) -> tuple[list[sqlite3.Row], int]:
    """A page of agents (newest first) with their latest execution, and the exact total."""
    where: list[str] = []
    params: list[Any] = []
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
        f"SELECT a.*, e.id AS execution_id, e.state, e.failure_kind, e.number, e.updated_at,"
        f" e.answer_sha256, e.integrity_failed_at, e.ended_at, e.verdict, e.account {_LIST_BASE}{clause}"
        f" ORDER BY a.created_at DESC, a.id DESC LIMIT ? OFFSET ?",
        [*params, limit, offset],
    ).fetchall()
    return rows, total


def transition(
    conn: sqlite3.Connection, execution_id: str, new: ExecutionState, **fields: Any
) -> ExecutionState:
    """Move an execution to `new` (checked against the lifecycle), set fields, log a `state` event.

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
    event = {"state": new.value, "from": old.value}
    if fields.get("failure_kind"):
        event["failure_kind"] = fields["failure_kind"]
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
