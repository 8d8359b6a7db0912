"""Batch and run views read from the store (one read transaction each)."""

import json
import sqlite3
from collections import Counter

from agent_run.domain.batch_models import AttemptView, BatchSummary, BatchView, RunView
from agent_run.domain.errors import BatchNotFound, RunNotFound
from agent_run.services.integrity import answer_verified
from agent_run.store import agents as agents_q
from agent_run.store import batches as batches_q
from agent_run.store.events import current_revision


def run_view(conn: sqlite3.Connection, row: sqlite3.Row) -> RunView:
    agent_state = verified = None
    if row["agent_id"]:
        latest = agents_q.latest_execution(conn, row["agent_id"])
        agent_state = latest["state"] if latest else None
        verified = answer_verified(latest) if latest else None
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
        attempt=row["attempt"],
        attempts=[
            AttemptView(attempt=a["attempt"], kind=a["kind"], agent_id=a["agent_id"])
            for a in batches_q.attempts(conn, row["id"])
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
    )


def batch_view(conn: sqlite3.Connection, batch_id: str) -> BatchView:
    conn.execute("BEGIN")
    try:
        batch = batches_q.get_batch(conn, batch_id)
        if batch is None:
            raise BatchNotFound(f"no batch {batch_id}", field="batch_id")
        runs = [run_view(conn, r) for r in batches_q.runs(conn, batch_id)]
        return BatchView(
            id=batch["id"],
            workflow=batch["workflow"],
            state=batch["state"],
            state_reason=batch["state_reason"],
            project_root=batch["project_root"],
            project_subdir=batch["project_subdir"],
            base_ref=batch["base_ref"],
            base_sha=batch["base_sha"],
            worktree_root=batch["worktree_root"],
            config=json.loads(batch["config_json"]),
            counts=dict(Counter(r.state for r in runs)),
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
