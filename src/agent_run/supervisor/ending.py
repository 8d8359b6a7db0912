"""Recording an execution's end, even on a full disk or a locked database: seal the answer
(verified after writing), then the terminal row with every held event; wait for space, free
the reserve, and as a last resort end `failed/storage_full` with the events dropped; wait out
a lock however long another writer holds it. Never a `succeeded` without its sealed answer,
and never silent: what could not be written is said in the log."""

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_run.domain.errors import AnswerIntegrity, StorageFull
from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState
from agent_run.store import agents as agents_q
from agent_run.store.db import is_busy, is_storage_full, storage_full, write
from agent_run.supervisor.eventlog import STORAGE_RETRY_SECONDS, ExecutionLog
from agent_run.supervisor.seal import read_verified_answer, seal_answer
from agent_run.supervisor.storage import StorageReserve, note


@dataclass
class Ending:
    """The end to record: state, row fields, and the answer still to seal (if succeeded)."""

    state: ExecutionState
    fields: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None
    failure: FailureKind | None = None


def seal_verified(
    directory: Path, answer: str, *, agent_id: str, execution_id: str
) -> dict[str, Any]:
    """Seal, then re-read and re-hash: a file the disk cut short is never reported sealed."""
    try:
        sealed = seal_answer(directory, answer, agent_id=agent_id, execution_id=execution_id)
        read_verified_answer(sealed.path, sealed.sha256, sealed.bytes)
    except OSError as exc:
        if is_storage_full(exc):
            raise storage_full("the sealed answer (answer.md)", exc) from None
        raise
    except AnswerIntegrity as exc:
        raise StorageFull(
            f"the sealed answer did not read back intact: {exc.message}",
            writing="the sealed answer (answer.md)",
        ) from None
    return {
        "answer_path": str(sealed.path),
        "answer_sha256": sealed.sha256,
        "answer_bytes": sealed.bytes,
        "answer_checked_at": time.time(),
    }


class EndWriter:
    def __init__(
        self, log: ExecutionLog, directory: Path, reserve: StorageReserve, wait_seconds: float
    ) -> None:
        self.log = log
        self.conn = log.conn
        self.directory = directory
        self.reserve = reserve
        self.wait_seconds = wait_seconds

    def record(self, ending: Ending) -> bool:
        """Write the end; True once it is in the database."""
        # A run already failing for a full disk does not wait for space again.
        wait = 0.0 if ending.failure is FailureKind.STORAGE_FULL else self.wait_seconds
        error = self._retry(lambda: self._write_full(ending), time.monotonic() + wait)
        if error is not None and self.reserve.release():
            note(f"storage_full: released the {self.reserve.size}-byte reserve to record the end")
            error = self._retry(lambda: self._write_full(ending), time.monotonic())
        if error is None:
            return True
        return self._write_minimal(ending, error)

    def _retry(self, attempt: Any, deadline: float) -> StorageFull | None:
        """Call `attempt` until it succeeds (None) or, while the disk stays full, the deadline
        passed (its last error). A locked database is waited out for as long as it stays
        locked: the lock says nothing about the run, and its holder releases it when it
        commits or ends (a supervisor that gave up here would leave its run to be called lost)."""
        noted = False
        while True:
            try:
                attempt()
                self.log.unlocked()
                return None
            except StorageFull as exc:
                if time.monotonic() >= deadline:
                    return exc
                if not noted:
                    note(f"storage_full: cannot record the end yet, retrying: {exc.message}")
                    noted = True
                time.sleep(STORAGE_RETRY_SECONDS)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                self.log.on_busy(exc)
                time.sleep(self.log.busy.delay)

    def _write_full(self, ending: Ending) -> None:
        if ending.answer is not None and "answer_sha256" not in ending.fields:
            ending.fields.update(
                seal_verified(
                    self.directory,
                    ending.answer,
                    agent_id=self.log.agent_id,
                    execution_id=self.log.execution_id,
                )
            )
        self.log.flush_raw()
        rows = self.log.pending()
        with write(self.conn, "the execution's end (events and terminal state)"):
            self.log.write_rows(rows + self.log.busy_rows())
            agents_q.transition(self.conn, self.log.execution_id, ending.state, **ending.fields)
        self.log.forget(len(rows))

    def _write_minimal(self, ending: Ending, error: StorageFull) -> bool:
        """Drop what is held and record only `failed/storage_full`, within the wait bound."""
        dropped = self.log.drop_all()
        lost = ""
        if ending.answer is not None:
            lost = (
                "; the answer was sealed in answer.md but its record is incomplete"
                if "answer_sha256" in ending.fields
                else "; the answer could not be sealed"
            )
        message = (
            ending.fields.get("failure_message")
            if ending.failure is FailureKind.STORAGE_FULL
            else None
        ) or f"the disk stayed full: {error.message}"
        message = f"{message}; {dropped} buffered row(s) could not be stored{lost}"[:1000]
        keep = {
            k: v for k, v in ending.fields.items() if k in ("exit_code", "usage_json", "cost_usd")
        }

        def attempt() -> None:
            with write(self.conn, "the execution's terminal state"):
                agents_q.transition(
                    self.conn,
                    self.log.execution_id,
                    ExecutionState.FAILED,
                    **keep,
                    failure_kind=FailureKind.STORAGE_FULL.value,
                    failure_message=message,
                )

        last = self._retry(attempt, time.monotonic() + self.wait_seconds)
        if last is None:
            note(
                f"storage_full: execution {self.log.execution_id} ended failed/storage_full: {message}"
            )
            return True
        note(
            f"storage_full: gave up recording the end of execution {self.log.execution_id} after "
            f"{self.wait_seconds:g}s; reconciliation will mark it lost: {last.message}"
        )
        return False
