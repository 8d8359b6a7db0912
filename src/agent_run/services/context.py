"""What every service call gets: the home, the config, database threads, spawn threads, the
revision watcher and the daemon's background tasks."""

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agent_run.config.model import Config
from agent_run.domain.errors import StorageFull
from agent_run.services.group_write import GroupWriter
from agent_run.store.db import connect, is_storage_full, on_commit, storage_full
from agent_run.store.events import current_revision, revision_and_state_changes
from agent_run.system.home import Home

T = TypeVar("T")
REVISION_POLL_SECONDS = 0.02
# The poll while every writer nudges (the daemon's wake socket is bound): only a lost nudge
# waits for it.
NUDGED_POLL_SECONDS = 0.2
NUDGE_GAP_SECONDS = 0.002
IDLE_POLL_SECONDS = 1.0
# Agents whose state changed that one revision move may list; past that, all state waiters wake.
STATE_CHANGES_LISTED = 256
# Threads that fork/exec supervisors: a spawn holds one for milliseconds, never the database's.
SPAWN_THREADS = 2
# Supervisors booting at once (fork to ready line: one interpreter start, ~80 ms idle, seconds
# on a saturated machine). Their readiness is awaited on the event loop, so this bounds CPU
# contention with the daemon, not threads. Queued spawns wait here, not on the database.
SUPERVISORS_STARTING = 4


class RevisionWatcher:
    """Polls the global event revision and wakes every waiter when it moves.

    Supervisors write from other processes, so the database is the only bus; one cheap poll
    here replaces one poll per waiting client. A nudge after each commit (a supervisor's over
    store/wake.py, the daemon's own from its database threads) cuts the poll's wait short, but
    never to less than NUDGE_GAP_SECONDS, so a storm of commits costs at most that many reads a
    second; while nudges can arrive, the poll is only their backstop (NUDGED_POLL_SECONDS).

    A waiter on one agent's state (`wait`) is woken only by a move that changed that state (a
    `state` event): while any such waiter parks, each read also lists the agents whose state
    changed in the range it moved over (`read_state_changes`), so parked waits on agents that
    stream messages cost the daemon one read per move, not one per waiter.
    """

    def __init__(
        self,
        read_revision: Callable[[], Any],
        poll_seconds: float = REVISION_POLL_SECONDS,
        read_state_changes: Callable[[int], Any] | None = None,
    ) -> None:
        self._read = read_revision
        # (after) -> (revision, the agents with a state event in (after, revision], or None when
        # there are too many to list)
        self._read_state_changes = read_state_changes
        self.poll_seconds = poll_seconds
        self.revision = 0
        self._changed = asyncio.Condition()
        self._waiters = 0
        # agent id -> (revision seen, event) of each waiter on that agent's state
        self._on_state: dict[str, list[tuple[int, asyncio.Event]]] = {}
        self._someone_waits = asyncio.Event()
        self._nudged = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def nudge(self) -> None:
        """A writer says the revision moved: read it now rather than at the next poll."""
        self._nudged.set()

    def nudge_from_thread(self) -> None:
        """`nudge` from another thread (a database thread after its commit)."""
        loop = self._loop
        if loop is None:
            return  # not running yet: its first read comes anyway
        try:
            loop.call_soon_threadsafe(self._nudged.set)
        except RuntimeError:  # the loop has closed: nobody is left to wake
            pass

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        while True:
            self._nudged.clear()  # before the read: a nudge during it is not lost
            changed: set[str] | None = None  # None: any agent's state may have changed
            if self._on_state and self._read_state_changes is not None:
                revision, ids = await self._read_state_changes(self.revision)
                changed = None if ids is None or revision < self.revision else set(ids)
            else:
                revision = await self._read()
            if revision != self.revision:
                self.revision = revision
                self._wake_on_state(changed, revision)
                async with self._changed:
                    self._changed.notify_all()
            if self._waiters:
                await self._pause()
            else:  # nobody waits: stay idle instead of polling 50 times a second
                self._someone_waits.clear()
                try:
                    await asyncio.wait_for(self._someone_waits.wait(), IDLE_POLL_SECONDS)
                except TimeoutError:
                    pass

    def _wake_on_state(self, changed: set[str] | None, revision: int) -> None:
        agents = self._on_state if changed is None else changed & self._on_state.keys()
        for agent_id in agents:
            for seen, event in self._on_state[agent_id]:
                if seen < revision:
                    event.set()

    async def _pause(self) -> None:
        try:
            await asyncio.wait_for(self._nudged.wait(), self.poll_seconds)
        except TimeoutError:
            return
        await asyncio.sleep(NUDGE_GAP_SECONDS)  # what else was committed meanwhile, in one read

    @property
    def parked(self) -> int:
        """How many long-polls wait on the revision now."""
        return self._waiters

    async def wait_past(self, revision: int, timeout: float, state_of: str | None = None) -> bool:
        """Wait until the revision is past `revision` (with `state_of`, an agent id: past it by a
        change of that agent's state, or by a move too large to tell); False on timeout."""
        if self.revision > revision:
            return True  # what moved since `revision` is not known here: the caller looks
        self._waiters += 1
        self._someone_waits.set()
        try:
            if state_of is None:
                async with self._changed:
                    await asyncio.wait_for(
                        self._changed.wait_for(lambda: self.revision > revision), timeout
                    )
            else:
                entry = (revision, asyncio.Event())
                self._on_state.setdefault(state_of, []).append(entry)
                try:
                    await asyncio.wait_for(entry[1].wait(), timeout)
                finally:
                    parked = self._on_state[state_of]
                    parked.remove(entry)
                    if not parked:
                        del self._on_state[state_of]
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters -= 1


def as_storage_full(exc: BaseException, writing: str) -> StorageFull | None:
    """`exc` as the typed full-disk error when it says the disk is full (a write outside
    `store.db.write`: a file, a directory), else None."""
    return storage_full(writing, exc) if is_storage_full(exc) else None


class ServiceContext:
    def __init__(self, home: Home, config: Config, *, threads: int = 32, log: Any = None) -> None:
        self.home = home
        self.config = config
        self.log = log  # the daemon's structlog logger, or None
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="db")
        self._spawner = ThreadPoolExecutor(max_workers=SPAWN_THREADS, thread_name_prefix="spawn")
        self._background: set[asyncio.Task[Any]] = set()
        self.supervisors_starting = asyncio.Semaphore(SUPERVISORS_STARTING)
        self._local = threading.local()
        self.grouped = GroupWriter(self.connection)  # admissions: one transaction for many
        self.watcher = RevisionWatcher(
            lambda: self.db(current_revision),
            read_state_changes=lambda after: self.db(
                revision_and_state_changes, after, STATE_CHANGES_LISTED
            ),
        )
        self.starting: set[str] = set()  # executions whose supervisor this daemon is spawning
        self.batches: Any = None  # the batch scheduler, made on first use (batches.service)
        self.live: Any = None  # the daemon's LiveConfig (services.live_config): reloads config.toml
        self.started_at = time.time()
        self.notice_channels: Any = None  # services.notice_channel.Channels, made on first use
        self.notice_passes = 0  # passes the notice dispatcher has made (services/notices.py)
        self.fork_server: Any = None  # supervisor.forkserver.ForkServer, when the daemon runs one
        self.hosts: Any = (
            None  # executors.ssh.HostRegistry: links to [hosts.NAME] (services/hosts.py)
        )

    def start_fork_server(self) -> None:
        """Make the supervisors' fork server (unless AGENT_RUN_FORK_SERVER=0): the daemon only,
        while it is single-threaded. Where this process can fork its zygote (`fork_zygote_here`)
        it does so now, for the cost of a fork; otherwise the zygote starts as a fresh
        interpreter with the daemon's first supervisor spawn (a plain one, as are any made while
        it imports), so a daemon that starts no agent never pays its imports."""
        from agent_run.supervisor.forkserver import ForkServer, fork_server_enabled
        from agent_run.supervisor.launch import supervisor_environment

        if fork_server_enabled():
            self.fork_server = ForkServer(
                self.home, supervisor_environment(), self.home.logs_dir / "zygote.log", self.log
            )
            self.fork_server.fork_zygote_here()

    def refresh_config(self) -> None:
        """Take config.toml's new contents if it changed and is valid (the daemon only)."""
        if self.live is None:
            return
        refused_before = self.live.refused
        if self.live.refresh():
            self.config = self.live.config
            if self.log is not None:
                self.log.info("config.reloaded", revision=self.live.revision)
        elif (
            self.live.refused is not None
            and self.live.refused != refused_before
            and self.log is not None
        ):
            self.log.warning(
                "config.refused",
                revision=self.live.refused.revision,
                field=self.live.refused.field,
                error=self.live.refused.message,
                kept=self.live.revision,
            )

    def warm_up(self) -> None:
        """Start every database thread (each opening its connection), spawn thread and the group
        writer now, at boot. Started lazily, each `Thread.start` blocks the event loop until the
        new thread runs: tens of milliseconds apiece on a loaded machine, in the first burst.
        The store is migrated first, once, before any of them opens it."""
        connect(self.home.db_path).close()
        for pool, opens_db in (
            (self._executor, True),
            (self._spawner, False),
            (self.grouped.thread, True),
        ):
            size = pool._max_workers  # noqa: SLF001 - the pool's own bound
            barrier = threading.Barrier(size)

            def occupy(opens_db: bool = opens_db, barrier: threading.Barrier = barrier) -> None:
                if opens_db:
                    self.connection()
                barrier.wait()  # every task on its own thread: the pool grows to its bound

            for future in [pool.submit(occupy) for _ in range(size)]:
                future.result()

    def connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            wait_ms = round(self.config.daemon.busy_timeout_seconds * 1000)
            conn = self._local.conn = connect(
                self.home.db_path, apply_migrations=False, busy_timeout_ms=wait_ms
            )
            on_commit(conn, self.watcher.nudge_from_thread)  # waiters learn of it at once
        return conn

    async def db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(conn, *args)` on a database thread with that thread's own connection."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, lambda: fn(self.connection(), *args, **kwargs)
        )

    async def spawn(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking process spawn on the spawn threads, never on a database thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._spawner, lambda: fn(*args))

    def in_background(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run `work` after the current request has replied; held here so it is never dropped."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None and self.log is not None:
            self.log.error("background.error", task=task.get_name(), error=repr(task.exception()))

    def shutdown(self) -> None:
        if self.fork_server is not None:
            self.fork_server.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._spawner.shutdown(wait=False, cancel_futures=True)
        self.grouped.shutdown()
