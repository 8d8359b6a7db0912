"""Batch and run views read from the store (one read transaction each). A run's result (answer
excerpt, diff stats) was measured when it settled (`batches/results.py`): a view runs no git."""

import json
import sqlite3
import time
from collections import Counter
from typing import Any

from agent_run.domain.batch_models import (
    AttemptView,
    BatchSummary,
    BatchView,
    RunView,
    UsageTotals,
)
from agent_run.domain.batch_states import RUN_SETTLED, RunState
from agent_run.domain.errors import BatchNotFound, RunNotFound
from agent_run.domain.run_results import (
    RANKING_RULE,
    ActivityKind,
    DiffStats,
    ReviewNote,
    RunActivity,
    excerpt,
)
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


_ACTIVITY: dict[str, ActivityKind] = {
    "assistant": "message",
    "tool_call": "tool_call",
    "tool": "tool_result",
}


def activity_of(message: sqlite3.Row | None) -> RunActivity | None:
    """A running run's latest message as what it is doing now, and since when."""
    if message is None:
        return None
    return RunActivity(
        kind=_ACTIVITY.get(message["role"], "user"),
        tool=message["name"] if message["role"] == "tool_call" else None,
        text=excerpt(message["content"]) or "",
        since=message["ts"],
    )


def duration(executions: list[sqlite3.Row]) -> float | None:
    """How long a run's agents ran: each started execution until it ended (or now)."""
    spans = [
        (e["ended_at"] or time.time()) - e["started_at"] for e in executions if e["started_at"]
    ]
    return round(sum(spans), 3) if spans else None


def reviews_of(children: list[sqlite3.Row]) -> list[ReviewNote]:
    """The reviewers of a ranked candidate (the runs whose parent it is), with score and reason."""
    notes = []
    for r in children:
        result = batches_q.result(r) if r["state"] == RunState.SUCCEEDED else None
        result = result if isinstance(result, dict) else {}
        notes.append(
            ReviewNote(
                run_id=r["id"],
                title=r["title"],
                state=r["state"],
                score=result.get("score"),
                reason=result.get("reason"),
            )
        )
    return notes


def measured(row: sqlite3.Row) -> tuple[str | None, DiffStats | None, bool]:
    """(answer excerpt, diff stats, whether run_merge has something to land) as measured."""
    diff = DiffStats.model_validate_json(row["diff_json"]) if row["diff_json"] else None
    can_merge = (
        RunState(row["state"]) in RUN_SETTLED
        and bool(row["branch"])
        and diff is not None
        and diff.commits > 0
        and (row["merged_head"] is None or row["merged_head"] != diff.head)
    )
    return row["answer_excerpt"], diff, can_merge


def run_view(
    conn: sqlite3.Connection,
    row: sqlite3.Row,
    *,
    attempts: list[sqlite3.Row] | None = None,
    latest: dict[str, sqlite3.Row] | None = None,
    children: list[sqlite3.Row] | None = None,
) -> RunView:
    """A run's view; `attempts`, `latest` (its agent's latest execution by agent id) and
    `children` (the runs whose parent it is) when read for a whole batch at once."""
    agent_state = verified = started_at = last = account = route = activity = None
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
            activity = activity_of(message)
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
        activity=activity,
        **_results(conn, row, children),
    )


def _results(
    conn: sqlite3.Connection, row: sqlite3.Row, children: list[sqlite3.Row] | None
) -> dict[str, Any]:
    """A run's result fields: measured when it settled, its executions' usage and duration,
    a candidate's reviews and rank reason."""
    if children is None and row["stage"] == "candidate":
        children = [
            r for r in batches_q.runs(conn, row["batch_id"]) if r["parent_run_id"] == row["id"]
        ]
    answer_excerpt, diff, can_merge = measured(row)
    executions = run_executions(conn, row["id"])
    return {
        "usage": usage_totals(executions),
        "answer_excerpt": answer_excerpt,
        "diff": diff,
        "duration_seconds": duration(executions),
        "reviews": reviews_of(children or []),
        "rank_reason": row["rank_reason"],
        "can_merge": can_merge,
    }


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
        children: dict[str, list[sqlite3.Row]] = {}
        for r in rows:
            if r["parent_run_id"]:
                children.setdefault(r["parent_run_id"], []).append(r)
        runs = [
            run_view(
                conn,
                r,
                attempts=attempts.get(r["id"], []),
                latest=latest,
                children=children.get(r["id"], []),
            )
            for r in rows
        ]
        return BatchView(
            id=batch["id"],
            title=batch["title"],
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
            ranking_rule=RANKING_RULE if batch["workflow"] == "ranked" else None,
            archived_at=batch["archived_at"],
            created_at=batch["created_at"],
            updated_at=batch["updated_at"],
            ended_at=batch["ended_at"],
            revision=current_revision(conn),
        )
    finally:
        conn.execute("COMMIT")


def batch_summary(batch: sqlite3.Row, counts: dict[str, int]) -> BatchSummary:
    """A list's row: `batch` as `store.batches.list_batches` read it (with `prompt_start`)."""
    return BatchSummary(
        id=batch["id"],
        title=batch["title"],
        workflow=batch["workflow"],
        state=batch["state"],
        state_reason=batch["state_reason"],
        project_root=batch["project_root"],
        prompt_excerpt=excerpt(batch["prompt_start"], 200) or "",
        runs=sum(counts.values()),
        counts=counts,
        archived_at=batch["archived_at"],
        created_at=batch["created_at"],
        ended_at=batch["ended_at"],
    )


def get_run_or_raise(conn: sqlite3.Connection, run_id: str) -> sqlite3.Row:
    run = batches_q.get_run(conn, run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id}", field="run_id")
    return run
