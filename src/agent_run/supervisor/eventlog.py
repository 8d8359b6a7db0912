"""One execution's outbox: its rows (events, messages, signals, field updates, transitions,
command resolutions) and its raw stream, written in few ordered transactions, and held in
memory (bounded) while the disk is full or another writer holds the database's lock, then
written when space returns or the lock is released."""

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from agent_run.domain.capacity import ENGINE_VALIDITY_SECONDS
from agent_run.domain.errors import StorageFull
from agent_run.domain.states import ExecutionState
from agent_run.engines.quota import QuotaWindow
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store.db import BusyBackoff, is_busy, is_storage_full, storage_full, write
from agent_run.store.events import append_event, append_message
from agent_run.store.reports import append_signal
from agent_run.store.samples import Sample, append_samples
from agent_run.supervisor.storage import STORE_BUSY_MARK, STORE_RECOVERED_MARK, note

FLUSH_INTERVAL_SECONDS = 0.05
# A write that took longer than this (it waited for the lock, or the machine is busy) doubles
# the interval to the next, up to the longest: fewer, larger transactions while the store is
# contended. A quick one brings it back.
SLOW_FLUSH_SECONDS = 0.1
LONGEST_FLUSH_INTERVAL_SECONDS = 1.0
FLUSH_MAX_ROWS = 200
STORAGE_RETRY_SECONDS = 1.0  # how often a full disk is tried again
ROW_OVERHEAD_BYTES = 64
DEFAULT_BUFFER_BYTES = 4 * 1024 * 1024


class ExecutionLog:
    def __init__(
        self,
        conn: sqlite3.Connection,
        agent_id: str,
        execution_id: str,
        runtime: str,
        *,
        account: str | None = None,
        raw_path: Path | None = None,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        self.conn = conn
        self.runtime = runtime
        self.account = account  # the execution's account: its quota samples carry it
        self.agent_id = agent_id
        self.execution_id = execution_id
        self.raw_path = raw_path
        self.buffer_bytes = buffer_bytes
        self._rows: list[tuple[str, Any]] = []
        self._sizes: list[int] = []  # estimated bytes of each row, for the buffer bound
        self._row_bytes = 0
        self._raw: list[bytes] = []
        self._raw_bytes = 0
        self._raw_fd: int | None = None
        self._last_flush = time.monotonic()
        self._soon = False  # flush_soon: due at the caller's next check, not after the interval
        self.full_since: float | None = None  # monotonic time the disk was first found full
        self.full_error: str | None = None
        self.dropped = 0  # rows and lines dropped once the buffer was exhausted
        self.busy = BusyBackoff()  # while another writer holds the lock: since when, next try
        self._backlog_said = False  # the log said this locked spell filled the buffer
        self.interval = FLUSH_INTERVAL_SECONDS  # between flushes: longer while writes are slow

    # -- buffering ----------------------------------------------------------------------------

    def _add(self, what: str, fields: Any, size: int = 0, *, droppable: bool = True) -> None:
        if droppable and self.exhausted:  # the run is being stopped for it: stay bounded
            self.dropped += 1
            return
        self._rows.append((what, fields))
        self._sizes.append(size + ROW_OVERHEAD_BYTES)
        self._row_bytes += size + ROW_OVERHEAD_BYTES

    @property
    def held_bytes(self) -> int:
        """Estimated size of what is buffered: rows and raw lines."""
        return self._row_bytes + self._raw_bytes

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self._add("event", (kind, data, time.time()), len(str(data)))

    def message(
        self, role: str, content: str, name: str | None = None, *, is_error: bool = False
    ) -> None:
        self._add("message", (role, name, content, time.time(), is_error), len(content))

    def signal(self, kind: str, status: int | None, retry_after: float | None, detail: str) -> None:
        """Rate-limit / quota evidence, kept as rows a capacity feature can read."""
        self._add("signal", (kind, status, retry_after, detail), len(detail))

    def quota(self, windows: tuple[QuotaWindow, ...]) -> None:
        """Quota windows the engine reported: capacity samples (and one `quota` event)."""
        self._add("samples", (windows, time.time()), 64 * len(windows))

    def update(self, **fields: Any) -> None:
        """Set fields of the execution row, in order with the events around it."""
        self._add("update", fields, droppable=False)  # small, and part of the state

    def transition(self, state: ExecutionState, **fields: Any) -> None:
        self._add("transition", (state, fields), droppable=False)

    def resolve(self, command: sqlite3.Row, state: str, result: str) -> None:
        self._add("resolve", (dict(command), state, result), len(result), droppable=False)

    def raw(self, line: bytes) -> None:
        """A redacted stdout line for runtime.jsonl."""
        if self.exhausted:
            self.dropped += 1
            return
        self._raw.append(line)
        self._raw_bytes += len(line)

    @property
    def exhausted(self) -> bool:
        return self.full_since is not None and self.held_bytes > self.buffer_bytes

    @property
    def backlogged(self) -> bool:
        """The database stays locked and what is held passed the buffer: the caller takes no
        more in (it stops reading the engine, which then waits on its pipe) until it drains."""
        return self.busy.since is not None and self.held_bytes > self.buffer_bytes

    def due(self) -> bool:
        due_in = self.due_in()
        return due_in is not None and due_in <= 0

    def flush_soon(self) -> None:
        """Make what is held due now: the caller's next `due` check flushes it, together with
        whatever it adds before then (the pump checks after each read's lines)."""
        self._soon = True

    def due_in(self) -> float | None:
        """Seconds until what is held should be flushed (0 or less: now); None: nothing held."""
        if not (self._rows or self._raw):
            return None
        if self.full_since is not None:
            return self._last_flush + STORAGE_RETRY_SECONDS - time.monotonic()
        if self.busy.since is not None:
            return self._last_flush + self.busy.delay - time.monotonic()
        if self._soon or len(self._rows) >= FLUSH_MAX_ROWS:
            return 0.0
        return self._last_flush + self.interval - time.monotonic()

    def pending(self) -> list[tuple[str, Any]]:
        """The buffered rows, to be written inside the caller's own transaction (then `forget`)."""
        return list(self._rows)

    def forget(self, count: int) -> None:
        """Drop the first `count` rows once the caller's transaction committed them."""
        self._row_bytes -= sum(self._sizes[:count])
        del self._rows[:count], self._sizes[:count]

    def drop_all(self) -> int:
        """Give up on every buffered row (the disk stayed full); how many there were."""
        count = len(self._rows) + len(self._raw)
        self.forget(len(self._rows))
        self._raw, self._raw_bytes = [], 0
        self.dropped += count
        return count

    # -- writing ------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write what is held. While the disk is full or the database locked nothing is lost:
        the rows stay buffered, are tried again (every STORAGE_RETRY_SECONDS for a full disk,
        after the busy backoff for a lock), and False is returned."""
        started = self._last_flush = time.monotonic()
        self._soon = False
        try:
            self.flush_raw()
            if self._rows:
                rows = self.pending()
                with write(self.conn, "the execution's events"):
                    self.write_rows(rows + self.busy_rows())
                self.forget(len(rows))
                self.unlocked()
                self._pace(time.monotonic() - started)
        except StorageFull as exc:
            self.on_storage_full(exc)
            return False
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            self.on_busy(exc)
            return False
        if self.full_since is not None:
            held = time.monotonic() - self.full_since
            self.full_since = self.full_error = None
            self.event(
                "storage_recovered", {"held_seconds": round(held, 3), "dropped": self.dropped}
            )
            note(
                f"storage_recovered: execution {self.execution_id} wrote what it held for {held:.1f}s"
            )
            return self.flush()
        return True

    def _pace(self, took: float) -> None:
        """A slow write makes the next one later (more rows per transaction, fewer
        transactions for the other writers to wait behind); a quick one restores the pace."""
        if took > SLOW_FLUSH_SECONDS:
            self.interval = min(self.interval * 2, LONGEST_FLUSH_INTERVAL_SECONDS)
        else:
            self.interval = FLUSH_INTERVAL_SECONDS

    def on_busy(self, exc: sqlite3.OperationalError) -> None:
        """Another writer held the lock past our busy timeout: keep everything, try later."""
        self.busy.failed()
        self._last_flush = time.monotonic()  # the backoff counts from the end of this try
        if self.busy.attempts == 1:
            note(
                f"{STORE_BUSY_MARK} execution {self.execution_id} holds its events in memory "
                f"(up to {self.buffer_bytes} bytes, then it stops reading the engine) and "
                f"retries: {exc}"
            )

    def busy_rows(self) -> list[tuple[str, Any]]:
        """A `store_busy` event for the write about to be tried, when earlier tries found the
        database locked (how long, how many): written in the same transaction as what waited."""
        if self.busy.since is None:
            return []
        data = {
            "held_seconds": round(time.monotonic() - self.busy.since, 3),
            "attempts": self.busy.attempts,
        }
        return [("event", ("store_busy", data, time.time()))]

    def say_backlogged(self) -> None:
        """Once per locked spell: the buffer is full, the engine's output waits in its pipe."""
        if not self._backlog_said:
            self._backlog_said = True
            note(
                f"{STORE_BUSY_MARK} execution {self.execution_id} holds {self.held_bytes} bytes, "
                "its whole buffer: the engine's output is not read until the database takes them"
            )

    def unlocked(self) -> None:
        """A write got through: if the database had been locked, the wait is over (and said)."""
        locked = self.busy.succeeded()
        if locked is not None:
            self._backlog_said = False
            note(
                f"{STORE_RECOVERED_MARK} execution {self.execution_id} wrote what it held for "
                f"{locked[0]:.1f}s ({locked[1]} tries found the database locked)"
            )

    def on_storage_full(self, exc: StorageFull) -> None:
        if self.full_since is None:
            self.full_since = time.monotonic()
            self.full_error = exc.message
            self._rows.insert(
                0, ("event", ("storage_full", {"error": exc.message[:500]}, time.time()))
            )
            self._sizes.insert(0, ROW_OVERHEAD_BYTES)
            self._row_bytes += ROW_OVERHEAD_BYTES
            note(
                f"storage_full: execution {self.execution_id} holds its events in memory "
                f"(up to {self.buffer_bytes} bytes) and retries: {exc.message}"
            )

    def flush_raw(self) -> None:
        """Append the held raw lines to runtime.jsonl; a full disk leaves no partial line."""
        if not self._raw or self.raw_path is None:
            self._raw, self._raw_bytes = [], 0
            return
        if self._raw_fd is None:
            self._raw_fd = os.open(self.raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        size = os.fstat(self._raw_fd).st_size
        view = memoryview(b"".join(self._raw))
        try:
            while view:
                view = view[os.write(self._raw_fd, view) :]
        except OSError as exc:
            if not is_storage_full(exc):
                raise
            os.ftruncate(self._raw_fd, size)
            raise storage_full(f"{self.raw_path.name}", exc) from None
        self._raw, self._raw_bytes = [], 0

    def close(self) -> None:
        if self._raw_fd is not None:
            os.close(self._raw_fd)
            self._raw_fd = None

    def _write_samples(self, windows: tuple[QuotaWindow, ...], observed_at: float) -> None:
        valid_until = observed_at + ENGINE_VALIDITY_SECONDS
        append_samples(
            self.conn,
            [
                Sample(
                    self.runtime,
                    self.account,
                    w.lane,
                    w.window,
                    w.remaining_percent,
                    w.reset_at,
                    observed_at,
                    valid_until,
                    "native",
                    self.execution_id,
                    w.reset_credits,
                )
                for w in windows
            ],
            retention=None,
        )
        append_event(
            self.conn,
            agent_id=self.agent_id,
            execution_id=self.execution_id,
            kind="quota",
            data={"windows": [[w.lane, w.window, w.remaining_percent] for w in windows]},
            ts=observed_at,
        )

    def write_rows(self, rows: list[tuple[str, Any]]) -> None:
        ids = {"agent_id": self.agent_id, "execution_id": self.execution_id}
        for what, fields in rows:
            if what == "event":
                kind, data, ts = fields
                append_event(self.conn, **ids, kind=kind, data=data, ts=ts)
            elif what == "signal":
                kind, status, retry_after, detail = fields
                append_signal(
                    self.conn,
                    **ids,
                    runtime=self.runtime,
                    kind=kind,
                    status=status,
                    retry_after=retry_after,
                    detail=detail,
                )
            elif what == "samples":
                self._write_samples(*fields)
            elif what == "message":
                role, name, content, ts, is_error = fields
                append_message(
                    self.conn,
                    **ids,
                    role=role,
                    name=name,
                    content=content,
                    ts=ts,
                    is_error=is_error,
                )
            elif what == "update":
                agents_q.update_execution(self.conn, self.execution_id, **fields)
            elif what == "transition":
                state, changes = fields
                agents_q.transition(self.conn, self.execution_id, state, **changes)
            else:
                command, state, result = fields
                commands_q.resolve(self.conn, command, state=state, result=result)
