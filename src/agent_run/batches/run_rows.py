"""A batch's run rows: created for a workflow's run specs (each in its own worktree on a new
branch at the pinned base, or in the folder it works in), and written by compare-and-set on the
run's (state, attempt) so a stop, rerun or cancel that came first wins."""

import sqlite3
from pathlib import Path
from typing import Any

from agent_run.batches.workflows import RunSpec, check_stage, workflow_named
from agent_run.domain.ids import new_id
from agent_run.store import batches as batches_q
from agent_run.store.db import write
from agent_run.system import git


def new_run_row(
    batch: sqlite3.Row, spec: RunSpec, runs: list[sqlite3.Row], label: str
) -> dict[str, Any]:
    """A run row for `spec`: its own worktree on a new branch at the pinned base (its folder
    named with the base's `label`), or the folder it works in (the project for generators and
    validators, its candidate's for reviewers)."""
    root, subdir = Path(batch["project_root"]), batch["project_subdir"]
    row: dict[str, Any] = {
        "id": new_id("rn"),
        "batch_id": batch["id"],
        "stage": spec.stage,
        "idx": spec.idx,
        "title": spec.title,
        "prompt": spec.prompt,
        "profile": spec.profile,
        "parent_run_id": spec.parent_run_id,
    }
    if spec.worktree:
        project = git.Project(root, subdir)
        path = git.worktree_path(
            Path(batch["worktree_root"]), project, label, batch["id"], spec.idx
        )
        branch = f"agent-run/{batch['id']}/{spec.stage}-{spec.idx}"
        git.add_worktree(root, path, branch, batch["base_sha"])
        row.update(
            worktree=str(path), branch=branch, workdir=str(path / subdir) if subdir else str(path)
        )
    elif spec.parent_run_id:
        parent = next(r for r in runs if r["id"] == spec.parent_run_id)
        row.update(workdir=parent["workdir"])
    else:
        row.update(workdir=str(root / subdir) if subdir else str(root))
    return row


def insert_runs(
    conn: sqlite3.Connection, batch: sqlite3.Row, specs: list[RunSpec], runs: list[sqlite3.Row]
) -> None:
    workflow = workflow_named(batch["workflow"])
    for spec in specs:
        check_stage(workflow, spec.stage)
    # Two git calls name the base, the same for every run of the batch: made once, not per run.
    label = (
        git.ref_label(Path(batch["project_root"]), batch["base_ref"], batch["base_sha"])
        if any(spec.worktree for spec in specs)
        else ""
    )
    rows = [new_run_row(batch, spec, runs, label) for spec in specs]  # git work outside the lock
    with write(conn):
        for row, spec in zip(rows, specs, strict=True):
            batches_q.insert_run(conn, row)
            if spec.locked:
                conn.execute("UPDATE batch_runs SET locked = 1 WHERE id = ?", (row["id"],))


def write_run(conn: sqlite3.Connection, run_id: str, **fields: Any) -> None:
    with write(conn):
        batches_q.update_run(conn, batches_q.get_run(conn, run_id), **fields)


def write_run_if(
    conn: sqlite3.Connection,
    run_id: str,
    expect_state: str | tuple[str, ...],
    expect_attempt: int,
    **fields: Any,
) -> bool:
    """`write_run` only while the run is still in `expect_state` at `expect_attempt` (compare-and-set)."""
    with write(conn):
        run = batches_q.get_run(conn, run_id)
        return run is not None and batches_q.update_run_if(
            conn, run, expect_state=expect_state, expect_attempt=expect_attempt, **fields
        )
