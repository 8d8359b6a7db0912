"""Connections, numbered SQL migrations (recorded in PRAGMA user_version) and write transactions."""

import errno
import functools
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from agent_run.domain.errors import StorageFull

BUSY_TIMEOUT_MS = 30_000
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_FULL = 13
# A write that found the store locked is tried again after these waits: doubling from the
# first up to the longest, for as long as the lock is held elsewhere (`until_unlocked`).
BUSY_RETRY_FIRST_SECONDS = 0.05
BUSY_RETRY_MAX_SECONDS = 1.0

T = TypeVar("T")
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def one(conn: sqlite3.Connection, sql: str, params: Any = ()) -> sqlite3.Row | None:
    """The first row of `sql`, or None."""
    row: sqlite3.Row | None = conn.execute(sql, params).fetchone()
    return row


def scalar(conn: sqlite3.Connection, sql: str, params: Any = ()) -> int:
    """The integer in the first column of the first row of `sql` (a count, a max, a pragma)."""
    return int(conn.execute(sql, params).fetchone()[0])


def sql_list(states: Iterable[str]) -> str:
    """A set of the domain's states as an SQL list, `('a', 'b')`, for `state IN ...`."""
    return "(" + ", ".join(f"'{state}'" for state in sorted(states)) + ")"


def inserted_id(cursor: sqlite3.Cursor) -> int:
    """The rowid an INSERT just made."""
    if cursor.lastrowid is None:
        raise sqlite3.InterfaceError("the statement inserted no row")
    return cursor.lastrowid


@functools.cache
def migrations() -> tuple[tuple[int, str, str], ...]:
    """(number, name, sql) for every file `NNNN_name.sql`, in order; read once per process (a
    supervisor's zygote reads them before it forks, so its supervisors read no file for them)."""
    from importlib import resources  # only migrating needs it; the worker tools start without it

    found = []
    for entry in resources.files("agent_run.store.migrations").iterdir():
        if entry.name.endswith(".sql"):
            number = int(entry.name.split("_", 1)[0])
            found.append((number, entry.name, entry.read_text()))
    return tuple(sorted(found))


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every migration newer than user_version, each in its own transaction. A store
    already at the newest takes no write lock (every supervisor connects through here)."""
    newest = migrations()[-1][0]
    current = scalar(conn, "PRAGMA user_version")
    if current >= newest:
        return current
    for number, _name, sql in migrations():
        with write(conn):
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            if number <= current:
                continue
            for statement in _split_sql(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
    return scalar(conn, "PRAGMA user_version")


def _split_sql(sql: str) -> list[str]:
    # executescript() would commit our transaction; our migrations have no ';' inside literals.
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [part.strip() for part in body.split(";") if part.strip()]


class StoreConnection(sqlite3.Connection):
    """A connection that may run a callback after each of its `write` transactions commits
    (`on_commit`: a supervisor nudges the daemon, store/wake.py)."""

    after_commit: Callable[[], None] | None = None


def on_commit(conn: sqlite3.Connection, callback: Callable[[], None] | None) -> None:
    """Run `callback` after each `write` on `conn` commits (a connection `connect` made)."""
    if isinstance(conn, StoreConnection):
        conn.after_commit = callback


def connect(
    path: Path, *, apply_migrations: bool = True, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> sqlite3.Connection:
    """Open the state database in WAL mode (file 0600), migrated to the newest schema; a write
    waits up to `busy_timeout_ms` for another writer's lock."""
    if not path.exists():
        path.touch(mode=0o600)
    conn = sqlite3.connect(
        path,
        isolation_level=None,
        timeout=busy_timeout_ms / 1000,
        check_same_thread=False,
        factory=StoreConnection,
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    if apply_migrations:
        migrate(conn)
    return conn


class ChangeWatch:
    """Whether anyone else committed to the database since a poll of `conn` last read it, so
    the poll's query would find what it found then. `PRAGMA data_version` changes once another
    connection (of any process) has committed, never for `conn`'s own commits; it reads the
    WAL index, not a table."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.seen: dict[str, int] = {}  # the version each poll last read at

    def unchanged(self, poll: str) -> bool:
        """True: skip `poll`'s query. False (the first time, or after a commit by another
        connection): run it; the version is taken first, so a commit made meanwhile is seen
        by this query or by the next call."""
        version = int(self.conn.execute("PRAGMA data_version").fetchone()[0])
        if self.seen.get(poll) == version:
            return True
        self.seen[poll] = version
        return False

    def forget(self, poll: str) -> None:
        """`poll`'s query did not complete (the store was locked): its next call runs it."""
        self.seen.pop(poll, None)


def is_storage_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or quota) is full: SQLITE_FULL or ENOSPC / EDQUOT."""
    if isinstance(exc, StorageFull):
        return True
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


def is_busy(exc: BaseException) -> bool:
    """Whether `exc` says another connection held the lock past this one's busy timeout
    (SQLITE_BUSY or SQLITE_LOCKED, "database is locked"): the same statement or transaction
    can succeed once the lock is released."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


def set_busy_timeout(conn: sqlite3.Connection, seconds: float) -> None:
    """How long each statement of `conn` waits for another writer's lock before it raises
    SQLITE_BUSY (`is_busy`)."""
    conn.execute(f"PRAGMA busy_timeout = {max(0, round(seconds * 1000))}")


class BusyBackoff:
    """While the store stays locked: since when, how many tries failed, and how long to wait
    before the next (doubling from BUSY_RETRY_FIRST_SECONDS up to BUSY_RETRY_MAX_SECONDS)."""

    def __init__(self) -> None:
        self.since: float | None = None  # monotonic time of the first failed try; None: not now
        self.attempts = 0
        self.delay = 0.0

    def failed(self) -> float:
        """One more try found the store locked: the wait before the next."""
        if self.since is None:
            self.since = time.monotonic()
        self.attempts += 1
        self.delay = min(BUSY_RETRY_MAX_SECONDS, max(BUSY_RETRY_FIRST_SECONDS, self.delay * 2))
        return self.delay

    def succeeded(self) -> tuple[float, int] | None:
        """A try got through: (seconds the store was locked, failed tries) if it had been, and
        the backoff starts over."""
        if self.since is None:
            return None
        locked = (time.monotonic() - self.since, self.attempts)
        self.since, self.attempts, self.delay = None, 0, 0.0
        return locked


def until_unlocked(
    attempt: Callable[[], T],
    on_busy: Callable[[sqlite3.OperationalError, BusyBackoff], None] | None = None,
) -> T:
    """`attempt()` (one whole transaction, or a read), tried again with backoff for as long as
    it finds the store locked (`is_busy`); any other error is raised. For writes that must
    happen however slow the store is: a supervisor's identity and end, a worker tool's report.
    `on_busy` hears of each failed try (a log line on the first)."""
    backoff = BusyBackoff()
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            delay = backoff.failed()
            if on_busy is not None:
                on_busy(exc, backoff)
            time.sleep(delay)


def storage_full(writing: str, exc: BaseException) -> StorageFull:
    return StorageFull(
        f"the disk holding the agent-run home is full: could not write {writing} "
        f"({exc}); nothing partial was kept, retry once space is freed",
        writing=writing,
    )


@contextmanager
def write(
    conn: sqlite3.Connection, writing: str = "the state database"
) -> Iterator[sqlite3.Connection]:
    """A write transaction that takes the write lock up front (BEGIN IMMEDIATE).

    A full disk (SQLITE_FULL, at any statement or at COMMIT) rolls the whole transaction back
    and raises `StorageFull` naming `writing`."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite may already have rolled back (SQLITE_FULL)
                conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as exc:
        if is_storage_full(exc):
            raise storage_full(writing, exc) from None
        raise
    callback = getattr(conn, "after_commit", None)
    if callback is not None:
        callback()
