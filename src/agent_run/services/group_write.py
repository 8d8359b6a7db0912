"""Group commit: small writes queued by many requests run in one write transaction on one thread.

A burst of 500 `start`s would otherwise be 500 threads contending for SQLite's write lock, and
SQLite's busy handler backs off in sleeps of up to 100 ms. Here one thread takes the lock once
per group; each write runs under its own savepoint, so one write's error fails only its caller.
A caller's result is delivered only after the group has committed.
"""

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agent_run.store.db import write

MAX_GROUP = 128  # writes per transaction: bounds how long one group holds the lock

Write = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]


class GroupWriter:
    def __init__(self, connection: Callable[[], sqlite3.Connection]) -> None:
        self._connection = connection  # the calling thread's own connection
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-write")
        self._queue: list[Write] = []
        self._draining: asyncio.Task[None] | None = None

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(conn, *args)` inside a shared write transaction; its result once committed."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((fn, args, future))
        if self._draining is None:
            self._draining = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                group, self._queue = self._queue[:MAX_GROUP], self._queue[MAX_GROUP:]
                try:
                    outcomes = await loop.run_in_executor(self.thread, self._run, group)
                except Exception as exc:  # BEGIN or COMMIT failed: nothing in the group landed
                    outcomes = [(False, exc)] * len(group)
                for (_fn, _args, future), (ok, value) in zip(group, outcomes, strict=True):
                    if future.done():  # its caller was cancelled
                        continue
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        finally:
            self._draining = None

    def _run(self, group: list[Write]) -> list[tuple[bool, Any]]:
        conn = self._connection()
        outcomes: list[tuple[bool, Any]] = []
        with write(conn):
            for fn, args, _future in group:
                conn.execute("SAVEPOINT grouped")
                try:
                    value = fn(conn, *args)
                except Exception as exc:
                    conn.execute("ROLLBACK TO grouped")
                    outcomes.append((False, exc))
                else:
                    outcomes.append((True, value))
                conn.execute("RELEASE grouped")
        return outcomes

    def shutdown(self) -> None:
        self.thread.shutdown(wait=False, cancel_futures=True)
