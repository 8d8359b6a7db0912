"""Reconciliation: mark an execution `lost` only on proof its supervisor is dead; kill its engine;
spawn the supervisor of an admitted execution no supervisor ever took.

Proof is gathered outside the SQLite write lock (scanning the process table is slow on a busy
machine);
the write re-checks the row under the lock (compare-and-set), and killing happens after it.
"""

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState
from agent_run.executors.local import probe_identity
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store.db import write
from agent_run.supervisor.identity import ProcessIdentity, engine_group_alive, kill_group
from agent_run.supervisor.storage import (
    RESERVE_NAME,
    filesystem_full,
    supervisor_log_says_busy,
    supervisor_log_says_full,
)
from agent_run.system.home import Home
from agent_run.system.processes import current as current_processes

# What a dead supervisor's row must still show for our proof to apply to it.
_PROVEN_FIELDS = ("state", "supervisor_pid", "supervisor_start_ticks", "boot_id", "engine_pid")


@dataclass(frozen=True)
class LostExecution:
    execution_id: str
    reason: str
    engine_group_killed: bool


@dataclass(frozen=True)
class OrphanExecution:
    """Committed (`created`) but no supervisor exists for it: its spawner died before spawning."""

    agent_id: str
    execution_id: str


@dataclass
class Reconciled:
    lost: list[LostExecution]
    orphans: list[OrphanExecution]


def supervised_executions() -> set[str]:
    """Execution ids that have a supervisor process now (from each process's command line), for
    rows with no identity yet. One scan of the process table per pass, however many such rows."""
    found = set()
    for _pid, args in current_processes().command_lines():
        if "agent_run.supervisor" in args and "--execution" in args:
            at = args.index("--execution") + 1
            if at < len(args):
                found.add(args[at])
    return found


def _proof_of_death(row: sqlite3.Row) -> str | None:
    """A reason the recorded supervisor is certainly gone, or None when it lives or we cannot tell
    (this machine's executor probes it: dead or reused is proof, unknown never is)."""
    if probe_identity(row).proves_end:
        return (
            f"supervisor pid {row['supervisor_pid']} is gone (exited, killed, reused or rebooted)"
        )
    return None


def _engine_leader(row: sqlite3.Row) -> ProcessIdentity | None:
    """The engine group's leader when its group still has members of ours, else None."""
    if row["engine_pid"] is None or not row["boot_id"]:
        return None
    leader = ProcessIdentity(row["engine_pid"], row["engine_start_ticks"] or 0, row["boot_id"])
    return leader if engine_group_alive(row["engine_pid"], leader) else None


def _mark_lost(conn: sqlite3.Connection, proven: sqlite3.Row, reason: str) -> bool:
    """Write `lost` if the row is still the one the proof was about. False if it moved on."""
    with write(conn, "a lost execution's state"):
        row = agents_q.get_execution(conn, proven["id"])
        if row is None or any(row[name] != proven[name] for name in _PROVEN_FIELDS):
            return False
        agents_q.transition(
            conn,
            row["id"],
            ExecutionState.LOST,
            failure_kind=FailureKind.SUPERVISOR_LOST.value,
            failure_message=reason,
        )
        for command in commands_q.pending(conn, row["id"]):
            commands_q.resolve(conn, command, state="refused", result="the execution was lost")
    return True


def storage_cause(home: Home, row: sqlite3.Row) -> str | None:
    """What the dead supervisor left about a full disk or a locked database (its log), or the
    disk's state now."""
    log = home.execution_dir(row["agent_id"], row["id"]) / "supervisor.log"
    said = supervisor_log_says_full(log)
    if said:
        return f"its log says the disk was full: {said}"
    waiting = supervisor_log_says_busy(log)
    if waiting:
        return f"it died waiting for the database's write lock: {waiting}"
    free = filesystem_full(home.root)
    if free is not None:
        return f"the filesystem holding {home.root} is full ({free} bytes free)"
    return None


def reconcile_execution(
    conn: sqlite3.Connection,
    execution_id: str,
    starting: set[str] | frozenset[str] = frozenset(),
    supervised: Callable[[], set[str]] = supervised_executions,
    home: Home | None = None,
) -> LostExecution | OrphanExecution | None:
    """Judge one execution: lost (written), orphaned (for the caller to spawn), or left alone."""
    # `starting` is the daemon's live set: an execution joins it before its row is committed
    # and leaves once its spawn has settled (the supervisor took the row, or it ended failed).
    if execution_id in starting:
        return None
    row = agents_q.get_execution(conn, execution_id)
    if row is None or ExecutionState(row["state"]).terminal:
        return None
    if row["host"] is not None:  # its host's record is the proof: the host mirror judges it
        return None
    if row["supervisor_pid"] is None:
        if row["state"] != ExecutionState.CREATED or execution_id in supervised():
            return None
        return OrphanExecution(row["agent_id"], execution_id)
    reason = _proof_of_death(row)
    if reason is None:
        return None
    leader = _engine_leader(row)
    if leader is not None:
        reason += "; its surviving engine group was killed"
    cause = storage_cause(home, row) if home is not None else None
    if cause:
        reason += f"; {cause}"
    if not _mark_lost(conn, row, reason):
        return None
    if home is not None:  # the dead supervisor's reserve is space nobody will use
        (home.execution_dir(row["agent_id"], row["id"]) / RESERVE_NAME).unlink(missing_ok=True)
    # The group was ours a moment ago; check again right before the signal, outside the lock.
    killed = (
        leader is not None and engine_group_alive(leader.pid, leader) and kill_group(leader.pid)
    )
    return LostExecution(execution_id, reason, killed)


def reconcile_once(
    conn: sqlite3.Connection, starting: set[str], home: Home | None = None
) -> Reconciled:
    """One pass over every live execution, except those this daemon is spawning right now."""
    done = Reconciled([], [])
    scanned: list[set[str]] = []

    def supervised() -> set[str]:  # scanned at most once, and only if a row needs it
        if not scanned:
            scanned.append(supervised_executions())
        return scanned[0]

    for row in agents_q.live_executions(conn):
        result = reconcile_execution(conn, row["id"], starting, supervised, home)
        if isinstance(result, LostExecution):
            done.lost.append(result)
        elif isinstance(result, OrphanExecution):
            done.orphans.append(result)
    return done
