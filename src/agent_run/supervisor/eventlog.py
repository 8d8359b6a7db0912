"""Batched writes of one execution's events and messages: few transactions, ordered rows."""

import sqlite3
import time
from typing import Any

from agent_run.store.db import write
from agent_run.store.events import append_event, append_message
from agent_run.store.reports import append_signal

FLUSH_INTERVAL_SECONDS = 0.05
FLUSH_MAX_ROWS = 200


class ExecutionLog:
    def __init__(self, conn: sqlite3.Connection, agent_id: str, execution_id: str,
                 runtime: str) -> None:
        self.conn = conn
        self.runtime = runtime
        self.agent_id = agent_id
        self.execution_id = execution_id
        self._rows: list[tuple[str, Any]] = []
        self._last_flush = time.monotonic()
        self.event_count = 0

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self._rows.append(("event", (kind, data, time.time())))

    def message(self, role: str, content: str, name: str | None = None) -> None:
        self._rows.append(("message", (role, name, content, time.time())))

    def signal(self, kind: str, status: int | None, retry_after: float | None, detail: str) -> None:
        """Rate-limit / quota evidence, kept as rows a capacity feature can read."""
        self._rows.append(("signal", (kind, status, retry_after, detail)))

    def due(self) -> bool:
        return bool(self._rows) and (
            len(self._rows) >= FLUSH_MAX_ROWS
            or time.monotonic() - self._last_flush >= FLUSH_INTERVAL_SECONDS
        )

    def take(self) -> list[tuple[str, Any]]:
        """Hand over the buffered rows, to be written inside the caller's own transaction."""
        rows, self._rows = self._rows, []
        return rows

    def flush(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        with write(self.conn):
            self.write_rows(rows)
        self._last_flush = time.monotonic()

    def write_rows(self, rows: list[tuple[str, Any]]) -> None:
        ids = {"agent_id": self.agent_id, "execution_id": self.execution_id}
        for what, fields in rows:
            if what == "event":
                kind, data, ts = fields
                append_event(self.conn, **ids, kind=kind, data=data, ts=ts)
                self.event_count += 1
            elif what == "signal":
                kind, status, retry_after, detail = fields
                append_signal(self.conn, **ids, runtime=self.runtime, kind=kind, status=status,
                              retry_after=retry_after, detail=detail)
            else:
                role, name, content, ts = fields
                append_message(self.conn, **ids, role=role, name=name, content=content, ts=ts)
