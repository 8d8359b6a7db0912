"""Reconciliation: mark an execution `lost` only on proof its supervisor is dead; kill its engine."""

import os
import sqlite3
from dataclasses import dataclass

from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState
from agent_run.home import Home
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store.db import write
from agent_run.supervisor.identity import (
    Liveness, ProcessIdentity, engine_group_alive, kill_group, liveness,
)
from agent_run.supervisor.storage import RESERVE_NAME, filesystem_full, supervisor_log_says_full


@dataclass(frozen=True)
class LostExecution:
    execution_id: str
    reason: str
    engine_group_killed: bool


def supervisor_processes(execution_id: str) -> list[int]:
    """Pids whose command line is a supervisor of this execution (for rows with no identity yet)."""
    needle = f"--execution\0{execution_id}\0".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if b"agent_run.supervisor" in cmdline and needle in cmdline:
            found.append(int(entry.name))
    return found


def _proof_of_death(row: sqlite3.Row) -> str | None:
    """A reason the supervisor is certainly gone, or None when it lives or we cannot tell."""
    if row["supervisor_pid"] is None:
        if supervisor_processes(row["id"]):
            return None
        return "no supervisor ever recorded itself and none is running"
    identity = ProcessIdentity(row["supervisor_pid"], row["supervisor_start_ticks"], row["boot_id"])
    if liveness(identity) is Liveness.DEAD:
        return f"supervisor pid {identity.pid} is gone (exited, killed, reused or rebooted)"
    return None


def _kill_engine(row: sqlite3.Row) -> bool:
    if row["engine_pid"] is None:
        return False
    leader = ProcessIdentity(row["engine_pid"], row["engine_start_ticks"] or 0, row["boot_id"] or "")
    if row["boot_id"] and engine_group_alive(row["engine_pid"], leader):
        return kill_group(row["engine_pid"])
    return False


def storage_cause(home: Home, row: sqlite3.Row) -> str | None:
    """What the dead supervisor left about a full disk (its log), or the disk's state now."""
    said = supervisor_log_says_full(home.execution_dir(row["agent_id"], row["id"]) / "supervisor.log")
    if said:
        return f"its log says the disk was full: {said}"
    free = filesystem_full(home.root)
    if free is not None:
        return f"the filesystem holding {home.root} is full ({free} bytes free)"
    return None


def reconcile_execution(conn: sqlite3.Connection, execution_id: str,
                        starting: set[str] | frozenset[str] = frozenset(),
                        home: Home | None = None) -> LostExecution | None:
    # Under the write lock: a supervisor cannot commit its own ending between our read and write.
    with write(conn, "a lost execution's state"):
        row = agents_q.get_execution(conn, execution_id)
        if row is None or ExecutionState(row["state"]).terminal:
            return None
        # `starting` is the daemon's live set: an execution joins it before its row is
        # committed and leaves it once its supervisor recorded itself (or the spawn failed).
        if execution_id in starting:
            return None
        reason = _proof_of_death(row)
        if reason is None:
            return None
        killed = _kill_engine(row)
        if killed:
            reason += "; its surviving engine group was killed"
        cause = storage_cause(home, row) if home is not None else None
        if cause:
            reason += f"; {cause}"
        if home is not None:  # the dead supervisor's reserve is space nobody will use
            (home.execution_dir(row["agent_id"], row["id"]) / RESERVE_NAME).unlink(missing_ok=True)
        agents_q.transition(conn, execution_id, ExecutionState.LOST,
                            failure_kind=FailureKind.SUPERVISOR_LOST.value, failure_message=reason)
        for command in commands_q.pending(conn, execution_id):
            commands_q.resolve(conn, command, state="refused", result="the execution was lost")
    return LostExecution(execution_id, reason, killed)


def reconcile_once(conn: sqlite3.Connection, starting: set[str],
                   home: Home | None = None) -> list[LostExecution]:
    """One pass over every live execution, except those this daemon is spawning right now."""
    lost = []
    for row in agents_q.live_executions(conn):
        result = reconcile_execution(conn, row["id"], starting, home)
        if result is not None:
            lost.append(result)
    return lost
