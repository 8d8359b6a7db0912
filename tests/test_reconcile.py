"""Reconciliation gathers its proof (a /proc scan, liveness) without holding the write lock."""

import sqlite3
from pathlib import Path

from agent_run.services.reconcile import OrphanExecution, reconcile_once
from agent_run.store.db import connect
from agent_run.supervisor.launch import spawn_supervisor
from tests.harness import db_rows, wait_for
from tests.test_admission import admit_without_spawning


def test_reconciliation_judges_live_and_orphaned_rows_while_another_writer_holds_the_lock(
    home, workdir
):
    live_agent, live_execution = admit_without_spawning(
        home, "steps: 400\nstep_seconds: 0.05", workdir
    )
    spawn_supervisor(
        home, live_execution, home.execution_dir(live_agent, live_execution) / "supervisor.log"
    )
    orphan_agent, orphan_execution = admit_without_spawning(home, "answer: later", workdir)

    holder = sqlite3.connect(home.db_path, isolation_level=None)
    reconciler = connect(home.db_path)
    reconciler.execute("PRAGMA busy_timeout = 300")  # a pass that wants the lock fails fast
    holder.execute("BEGIN IMMEDIATE")  # a supervisor mid-write, say
    try:
        done = reconcile_once(reconciler, set())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        reconciler.close()
    assert done.lost == []
    assert done.orphans == [OrphanExecution(orphan_agent, orphan_execution)]
    states = {r["id"]: r["state"] for r in db_rows(home, "SELECT id, state FROM executions")}
    assert states[orphan_execution] == "created"
    assert states[live_execution] in ("starting", "running")


def test_created_row_whose_supervisor_process_exists_is_not_an_orphan(home, workdir):
    """A supervisor started by a daemon that then died may not have recorded itself yet: a
    process with its `--execution ID` command line means hands off."""
    import subprocess
    import sys

    _agent, execution = admit_without_spawning(home, "answer: mine", workdir)
    stand_in = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdin.read()",
            "agent_run.supervisor",
            "--execution",
            execution,
        ],
        stdin=subprocess.PIPE,
    )
    # Popen returns once the child is forked, maybe before its exec: until then its command
    # line is this process's, and nothing names the execution yet.
    wait_for(
        lambda: execution in Path(f"/proc/{stand_in.pid}/cmdline").read_bytes().decode(),
        what="the stand-in's command line",
    )
    conn = connect(home.db_path)
    try:
        assert reconcile_once(conn, set()).orphans == []
        stand_in.stdin.close()
        stand_in.wait(timeout=30)
        assert [o.execution_id for o in reconcile_once(conn, set()).orphans] == [execution]
    finally:
        conn.close()
        if stand_in.poll() is None:
            stand_in.kill()
