"""Batch and run views read from the store (one read transaction each)."""

import json
import sqlite3
from collections import Counter

from agent_run.domain.batch_models import (
    AttemptView,
    BatchSummary,
    BatchView,
    RunView,
    UsageTotals,
)
from agent_run.domain.batch_states import RunState
from agent_run.domain.errors import BatchNotFound, RunNotFound
from agent_run.services.integrity import answer_verified
from agent_run.store import agents as agents_q
from agent_run.store import batches as batches_q
from agent_run.store.events import current_revision, last_message
from agent_run.store.usage import batch_executions, run_executions


def usage_totals(rows: list[sqlite3.Row]) -> UsageTotals:
    """The reported tokens and cost of some executions (cost null when none has one)."""
    input_tokens = output_tokens = costed = 0
    cost = 0.0
    for row in rows:
        usage = json.loads(row["usage_json"]) if row["usage_json"] else {}
        input_tokens += int(usage.get("input_tokens") or 0)
        output_tokens += int(usage.get("output_tokens") or 0)
        if row["cost_usd"] is not None:
            cost += row["cost_usd"]
            costed += 1
    return UsageTotals(
        executions=len(rows),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        cost_usd=round(cost, 6) if costed else None,
        cost_reported_by=costed,
    )


def run_view(
    conn: sqlite3.Connection,
    row: sqlite3.Row,
    *,
    attempts: list[sqlite3.Row] | None = None,
    latest: dict[str, sqlite3.Row] | None = None,
) -> RunView:
    """A run's view; `attempts` and `latest` (its agent's latest execution by agent id) when
    the caller read them for a whole batch at once."""
    agent_state = verified = started_at = last = account = route = None
    if row["agent_id"]:
        latest_of = (
            agents_q.latest_execution(conn, row["agent_id"])
            if latest is None
            else latest.get(row["agent_id"])
        )
        agent_state = latest_of["state"] if latest_of else None
        verified = answer_verified(latest_of) if latest_of else None
        started_at = latest_of["started_at"] if latest_of else None
        account = latest_of["account"] if latest_of else None
        route = latest_of["route"] if latest_of else None
        if row["state"] == RunState.RUNNING:
            message = last_message(conn, row["agent_id"])
            last = message["content"][:300] if message else None
    return RunView(
        id=row["id"],
        stage=row["stage"],
        index=row["idx"],
        parent_run_id=row["parent_run_id"],
        title=row["title"],
        state=row["state"],
        failure=row["failure"],
        agent_id=row["agent_id"],
        agent_state=agent_state,
        answer_verified=verified,
        started_at=started_at,
        last_message=last,
        attempt=row["attempt"],
        attempts=[
            AttemptView(attempt=a["attempt"], kind=a["kind"], agent_id=a["agent_id"])
            for a in (batches_q.attempts(conn, row["id"]) if attempts is None else attempts)
        ],
        worktree=row["worktree"],
        branch=row["branch"],
        workdir=row["workdir"],
        locked=bool(row["locked"]),
        score=row["score"],
        rank=row["rank"],
        verify_passed=None if row["verify_passed"] is None else bool(row["verify_passed"]),
        verify_output=row["verify_output"],
        result=batches_q.result(row),
        merged_sha=row["merged_sha"],
        merged_into=row["merged_into"],
        account=account,
        route=route,
        usage=usage_totals(run_executions(conn, row["id"])),
    )


def batch_view(conn: sqlite3.Connection, batch_id: str) -> BatchView:
    conn.execute("BEGIN")
    try:
        batch = batches_q.get_batch(conn, batch_id)
        if batch is None:
            raise BatchNotFound(f"no batch {batch_id}", field="batch_id")
        rows = batches_q.runs(conn, batch_id)
        # Three queries for the whole batch, not three per run.
        attempts = batches_q.attempts_of_batch(conn, batch_id)
        latest = agents_q.latest_executions(conn, [r["agent_id"] for r in rows if r["agent_id"]])
        runs = [run_view(conn, r, attempts=attempts.get(r["id"], []), latest=latest) for r in rows]
        return BatchView(
            id=batch["id"],
            workflow=batch["workflow"],
            state=batch["state"],
            state_reason=batch["state_reason"],
            project_root=batch["project_root"],
            project_subdir=batch["project_subdir"],
            base_ref=batch["base_ref"],
            base_sha=batch["base_sha"],
            base_branch=batch["base_branch"],
            worktree_root=batch["worktree_root"],
            config=json.loads(batch["config_json"]),
            counts=dict(Counter(r.state for r in runs)),
            usage=usage_totals(batch_executions(conn, batch_id)),
            runs=runs,
            created_at=batch["created_at"],
            updated_at=batch["updated_at"],
            ended_at=batch["ended_at"],
            revision=current_revision(conn),
        )
    finally:
        conn.execute("COMMIT")


def batch_summary(conn: sqlite3.Connection, batch: sqlite3.Row) -> BatchSummary:
    runs = batches_q.runs(conn, batch["id"])
    return BatchSummary(
        id=batch["id"],
        workflow=batch["workflow"],
        state=batch["state"],
        project_root=batch["project_root"],
        runs=len(runs),
        counts=dict(Counter(r["state"] for r in runs)),
        created_at=batch["created_at"],
    )


def get_run_or_raise(conn: sqlite3.Connection, run_id: str) -> sqlite3.Row:
    run = batches_q.get_run(conn, run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id}", field="run_id")
    return run
