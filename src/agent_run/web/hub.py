"""One `changes` long-poll per web process, shared by every open page.

Twenty tabs must not mean twenty long-polls on the daemon: the hub follows the daemon's
revision with a single `changes` call at a time and keeps the recent changes in memory; each
`/events` stream reads from it. A stream that resumes from a revision older than the memory
asks the daemon directly once (`changes` after that revision), then joins the hub.

While a busy batch changes the store constantly, each call would return at once; the hub
pauses FOLLOW_PAUSE_SECONDS after a call that found changes, so it asks the daemon at most ten
times a second (the streams send at most ten events a second anyway), and what changed
meanwhile comes in the next answer.
"""

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

from agent_run.domain.errors import DomainError, ProtocolError

LONG_POLL_SECONDS = 15.0
RETRY_SECONDS = 1.0
FOLLOW_PAUSE_SECONDS = 0.1
HISTORY = 2048
NOW = 2**62  # an after_revision past any real one: `changes` then only reports the revision


@dataclass(frozen=True)
class Change:
    after: int  # the revision this change starts after ...
    revision: int  # ... and the one it ends at
    agents: frozenset[str]
    batches: frozenset[str]
    truncated: bool = False


class ChangeHub:
    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self.revision: int | None = None
        self.connected = False  # the last call to the daemon answered
        self.calls = 0  # `changes` calls answered (what following the daemon costs it)
        self.history: deque[Change] = deque(maxlen=HISTORY)
        self._moved = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            try:
                if self.revision is None:
                    self.revision = (await self.proxy.call("changes", {"after_revision": NOW}))[
                        "revision"
                    ]
                    self.connected = True
                    async with self._moved:  # streams waiting for a first revision say hello now
                        self._moved.notify_all()
                result = await self.proxy.call(
                    "changes", {"after_revision": self.revision, "wait_seconds": LONG_POLL_SECONDS}
                )
            except (
                DomainError,
                ProtocolError,
                OSError,
                ValueError,
            ):  # the daemon is away or cut us off: retry
                self.connected = False
                async with self._moved:
                    self._moved.notify_all()
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self.connected = True
            moved = result["revision"] > self.revision
            if moved:
                self.history.append(
                    Change(
                        self.revision,
                        result["revision"],
                        frozenset(result["agents"]),
                        frozenset(result["batches"]),
                        result["truncated"],
                    )
                )
                self.revision = result["revision"]
            self.calls += 1
            async with self._moved:
                self._moved.notify_all()
            if moved:
                await asyncio.sleep(FOLLOW_PAUSE_SECONDS)

    async def wait_past(self, revision: int, timeout: float) -> None:
        async with self._moved:
            try:
                await asyncio.wait_for(
                    self._moved.wait_for(
                        lambda: self.revision is not None and self.revision > revision
                    ),
                    timeout,
                )
            except TimeoutError:
                pass

    def since(self, revision: int) -> Change | None:
        """Everything after `revision` from memory, merged; None when memory does not reach back."""
        if self.revision is None or self.revision <= revision:
            return None
        if not self.history or self.history[0].after > revision:
            return None
        parts = [c for c in self.history if c.revision > revision]
        return Change(
            revision,
            self.revision,
            frozenset().union(*(c.agents for c in parts)),
            frozenset().union(*(c.batches for c in parts)),
            any(c.truncated for c in parts),
        )

    async def catch_up(self, revision: int) -> Change | None:
        """What changed after `revision`: from memory, or else from the daemon directly."""
        change = self.since(revision)
        if change is not None or (self.revision is not None and self.revision <= revision):
            return change
        result = await self.proxy.call("changes", {"after_revision": revision})
        if result["revision"] <= revision:
            return None
        return Change(
            revision,
            result["revision"],
            frozenset(result["agents"]),
            frozenset(result["batches"]),
            result["truncated"],
        )
