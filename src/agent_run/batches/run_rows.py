"""A batch's run rows: planned for a workflow's run specs (each in its own worktree on a new
branch at the pinned base, or in the folder it works in), committed before any worktree or
branch of theirs exists, then their worktrees made; and written by compare-and-set on the run's
(state, attempt) so a stop, rerun or cancel that came first wins.

Rows first: whatever agent-run makes in git is named by a row before it exists, so a daemon
killed in between leaves rows whose worktrees the next decision (or the caller's retry of the
same `batch_start`) makes, and which `batch clean` finds."""

import sqlite3
from pathlib import Path
from typing import Any

from agent_run.batches.workflows import RunSpec, check_stage, workflow_named
from agent_run.domain.batch_states import RunState
from agent_run.domain.ids import new_id
from agent_run.store import batches as batches_q
from agent_run.store.db import write
from agent_run.system import git

Batch = sqlite3.Row | dict[str, Any]  # a batch row, or one about to be inserted


def run_branch(batch_id: str, spec: RunSpec) -> str:
    return f"agent-run/{batch_id}/{spec.stage}-{spec.idx}"


def new_run_row(
    batch: Batch, spec: RunSpec, runs: list[sqlite3.Row], label: str, made: dict[str, Path]
) -> dict[str, Any]:
    """A run row for `spec`: its own worktree on a new branch at the pinned base (its folder
    named with the base's `label`, or the one an earlier, cut admission `made` on that branch),
    or the folder it works in (the project for generators and validators, its candidate's for
    reviewers). Nothing is made here."""
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
        "locked": int(spec.locked),
    }
    if spec.worktree:
        project = git.Project(root, subdir)
        branch = run_branch(batch["id"], spec)
        path = made.get(branch) or git.worktree_path(
            Path(batch["worktree_root"]), project, label, batch["id"], spec.idx
        )
        row.update(
            worktree=str(path), branch=branch, workdir=str(path / subdir) if subdir else str(path)
        )
    elif spec.parent_run_id:
        parent = next(r for r in runs if r["id"] == spec.parent_run_id)
        row.update(workdir=parent["workdir"])
    else:
        row.update(workdir=str(root / subdir) if subdir else str(root))
    return row


def plan_runs(batch: Batch, specs: list[RunSpec], runs: list[sqlite3.Row]) -> list[dict[str, Any]]:
    """The rows of `specs` (git reads only; run it outside the write lock)."""
    workflow = workflow_named(batch["workflow"])
    for spec in specs:
        check_stage(workflow, spec.stage)
    if not any(spec.worktree for spec in specs):
        return [new_run_row(batch, spec, runs, "", {}) for spec in specs]
    root = Path(batch["project_root"])
    # Two git calls name the base, the same for every run of the batch: made once, not per run.
    label = git.ref_label(root, batch["base_ref"], batch["base_sha"])
    # A batch admitted by an older agent-run that was cut after git work has worktrees and no
    # rows: its runs take those worktrees, not new folders that git would refuse the branch.
    made = git.worktree_branches(root)
    return [new_run_row(batch, spec, runs, label, made) for spec in specs]


def insert_rows(conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
    """Inside the caller's write transaction."""
    for row in rows:
        batches_q.insert_run(conn, row)


def insert_runs(
    conn: sqlite3.Connection, batch: sqlite3.Row, specs: list[RunSpec], runs: list[sqlite3.Row]
) -> None:
    rows = plan_runs(batch, specs, runs)  # git reads outside the write lock
    with write(conn):
        insert_rows(conn, rows)


def unstarted_worktrees(runs: list[sqlite3.Row]) -> list[sqlite3.Row]:
    """The runs with a worktree of their own that have never started: theirs may be unmade."""
    return [r for r in runs if r["worktree"] and r["state"] == RunState.QUEUED and not r["attempt"]]


def make_worktrees(batch: Batch, runs: list[sqlite3.Row]) -> None:
    """The worktree (and branch) of each run that has not started yet, where it is missing: its
    row was committed first, so this finishes an admission a kill cut. A no-op for a worktree
    that is there (`git.add_worktree`)."""
    root = Path(batch["project_root"])
    for run in unstarted_worktrees(runs):
        git.add_worktree(root, Path(run["worktree"]), run["branch"], batch["base_sha"])


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
