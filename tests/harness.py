"""Test harness: real homes, a real daemon process, real CLI invocations, condition waits."""

import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_run.domain.errors import DaemonUnavailable
from agent_run.rpc.client import RawClient
from agent_run.supervisor.identity import Liveness, ProcessIdentity, kill_group, liveness
from agent_run.system.home import Home

# The suite's agents run at `nice = 0`: on a test machine busy with other tests, agents that
# yield the CPU (10, the default until 2026-12-07; 5 now) made `--fast` ~20 s slower; tests/test_priority.py checks the
# default.
TEST_CONFIG = """schema_version = 1
default_runtime = "demo"
[supervisor]
stall_seconds = 60.0
cancel_grace_seconds = 1.0
nice = 0
[daemon]
reconcile_interval_seconds = 0.2
[runtimes.demo]
engine = "demo"
models = ["demo-1"]
default_model = "demo-1"
"""


# Every folder short_tmpdir made in this process, in order: conftest removes those a test made
# when it ends, and lists any still there at the end of the session (tests/conftest.py).
TMPDIRS_MADE: list[Path] = []
MADE_BY: dict[Path, str] = {}  # folder -> the test (and phase) that made it


# Golden files (text snapshots, service definitions): compared byte for byte; a missing or
# different one fails unless AGENT_RUN_UPDATE_SNAPSHOTS=1, which rewrites it deliberately.
# AGENT_RUN_SNAPSHOTS_DIR points the check elsewhere (tests/test_tmpdirs.py's child sessions).
UPDATE_SNAPSHOTS_ENV = "AGENT_RUN_UPDATE_SNAPSHOTS"
SNAPSHOTS_DIR_ENV = "AGENT_RUN_SNAPSHOTS_DIR"


def snapshots_dir() -> Path:
    return Path(os.environ.get(SNAPSHOTS_DIR_ENV) or Path(__file__).parent / "snapshots")


def check_golden(name: str, text: str) -> None:
    """`text` must equal the golden file `name`; only AGENT_RUN_UPDATE_SNAPSHOTS=1 writes one."""
    path = snapshots_dir() / name
    if os.environ.get(UPDATE_SNAPSHOTS_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), (
        f"golden file {path} is missing: {UPDATE_SNAPSHOTS_ENV}=1 writes it (then review and "
        f"commit it); got:\n{text}"
    )
    assert text == path.read_text(), (
        f"{name} differs from {path} ({UPDATE_SNAPSHOTS_ENV}=1 rewrites it deliberately):\n{text}"
    )


def short_tmpdir(prefix: str = "art-") -> Path:
    """A temp dir with a short path under /tmp (homes of any length work too:
    tests/test_long_home.py)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    TMPDIRS_MADE.append(path)
    MADE_BY[path] = os.environ.get("PYTEST_CURRENT_TEST", "outside a test")
    return path


def remove_tmpdirs(paths: list[Path]) -> list[Path]:
    """Remove these folders (git worktrees inside them included), first killing the
    supervisors and engines of any agent-run home in them, and any process still naming the
    folder (one not recorded yet would write into it again); return those that existed."""
    existed = [path for path in paths if path.exists()]
    homes = []  # the folders holding an agent-run home: where a daemon or supervisor may write
    for path in existed:
        for db in [*path.glob("state.db"), *path.glob("*/state.db")]:
            kill_leftovers(Home(db.parent))
            homes.append(path)
    if homes:
        kill_processes_naming(*homes)
    for path in existed:
        shutil.rmtree(path, ignore_errors=True)
    return existed


def kill_processes_naming(*folders: Path) -> None:
    """SIGKILL every process whose command line names one of `folders` or a path inside one (a
    daemon, its fork server, a supervisor that has not recorded itself yet, an engine or its
    bubblewrap), and wait until each has ended: none then writes into a removed folder."""
    from agent_run.system.processes import current

    roots = [str(folder) for folder in folders]
    ours = {os.getpid(), os.getppid()}
    killed = []
    for pid, args in current().command_lines():
        named = any(arg == root or f"{root}/" in arg for arg in args for root in roots)
        if pid in ours or not named:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    wait_for(lambda: not any(_running(pid) for pid in killed), timeout=30, what="them to end")


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
) -> Any:
    """Poll until `predicate()` is truthy; fail after a generous bound. Never a bare sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def engine_row(home: Home, agent_id: str, timeout: float = 30.0) -> Any:
    """The agent's execution row once its engine is running (its pid recorded)."""
    query = "SELECT * FROM executions WHERE agent_id = ? AND engine_pid IS NOT NULL"
    return wait_for(
        lambda: next(iter(db_rows(home, query, (agent_id,))), None),
        timeout=timeout,
        what="the engine to run",
    )


async def wait_for_async(
    predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition"
) -> Any:
    """`wait_for` inside an event loop: poll without blocking the loop; fail after the bound."""
    import asyncio

    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
    return value


def cli(
    home: Home,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("AGENT_RUN_HOME", None)
    argv = ["--home", str(home.root), *args]
    from tests.zygote_client import forkable, run_cli

    if forkable(env):
        # Forked from the pre-imported zygote (tests/support/zygote.py): the same `python -m
        # agent_run ...`, without a second of imports per call.
        return run_cli(argv, full_env, input, timeout)
    return subprocess.run(
        [sys.executable, "-m", "agent_run", *argv],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        input=input,
    )


def cli_json(home: Home, *args: str, **kwargs: Any) -> Any:
    result = cli(home, *args, **kwargs)
    assert result.stdout.strip(), f"no output; stderr: {result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


class DaemonProcess:
    """`agent-run api serve` as a real child process of the test."""

    def __init__(
        self,
        home: Home,
        env: dict[str, str] | None = None,
        nofile_soft: int | None = None,
        fresh: bool = False,
        command: list[str] | None = None,
    ) -> None:
        self.home = home
        self.env = env or {}
        self.nofile_soft = nofile_soft  # start it with this soft RLIMIT_NOFILE (the hard one kept)
        self.fresh = fresh or command is not None  # a fresh interpreter, as a user's is
        # what a fresh one runs (default `python -m agent_run --home H api serve`)
        self.command = command
        self.proc: Any = None  # a tests.zygote_client.Forked: pid, poll, wait, kill, terminate

    def start(self) -> "DaemonProcess":
        from tests.zygote_client import forkable, spawn

        env = {**os.environ, **self.env}
        env.pop("AGENT_RUN_HOME", None)
        if self.fresh or not forkable(self.env):
            self.proc = self._popen(env)
            wait_for(self._answers, timeout=30, what="the daemon to answer ping")
            return self
        # Forked from a zygote that has the daemon's imports loaded: the same `python -m
        # agent_run ... api serve`, a second of CPU cheaper per boot (tests/support/zygote.py).
        self.proc = spawn(
            ["--home", str(self.home.root), "api", "serve"],
            env,
            self.home.root / "daemon-test.out",
            self.nofile_soft,
        )
        wait_for(self._answers, timeout=30, what="the daemon to answer ping")
        return self

    def _popen(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """`python -m agent_run ... api serve` started afresh, in its own session."""
        argv = self.command or [
            sys.executable,
            "-m",
            "agent_run",
            "--home",
            str(self.home.root),
            "api",
            "serve",
        ]
        limit = None
        if self.nofile_soft is not None:
            soft = self.nofile_soft

            def limit() -> None:
                resource.setrlimit(
                    resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
                )

        with open(self.home.root / "daemon-test.out", "ab") as out:
            return subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                preexec_fn=limit,
            )

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = self.home.root / "daemon-test.out"
            out = log.read_text() if log.exists() else "(no output)"
            raise AssertionError(f"daemon exited {self.proc.returncode}: {out[-2000:]}")
        try:
            with RawClient(self.home.socket_path, timeout=5) as client:
                return client.call("ping")["pid"] == self.proc.pid
        except (OSError, DaemonUnavailable):  # not listening yet, or the killed one's backlog
            return False

    def client(self, timeout: float | None = 60) -> RawClient:
        return RawClient(self.home.socket_path, timeout)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with self.client() as client:
            return client.call(method, params)

    def wait_notice_passes(self, count: int) -> None:
        """Wait until the notice dispatcher has made `count` more passes (`ping`'s count); the
        last of them began after this call."""
        first = self.call("ping")["notice_passes"]
        wait_for(
            lambda: self.call("ping")["notice_passes"] >= first + count,
            what=f"{count} notice dispatcher passes",
        )

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def db_rows(home: Home, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    """Read the state database directly (tests only: front-ends never do)."""
    conn = sqlite3.connect(home.db_path, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def kill_leftovers(home: Home) -> None:
    """Kill every supervisor and engine group this home started, by recorded identity."""
    if not home.db_path.exists():
        return
    for row in db_rows(home, "SELECT * FROM executions"):
        if row["engine_pid"]:
            kill_group(row["engine_pid"], signal.SIGKILL)
        if row["supervisor_pid"] and row["supervisor_start_ticks"]:
            ident = ProcessIdentity(
                row["supervisor_pid"], row["supervisor_start_ticks"], row["boot_id"]
            )
            if liveness(ident) is Liveness.ALIVE:
                try:
                    os.kill(ident.pid, signal.SIGKILL)
                except ProcessLookupError:  # it ended between the look and the kill
                    pass


def supervisors_gone(home: Home) -> bool:
    """Whether no supervisor of this home is alive (by recorded identity): none still writes."""
    for row in db_rows(home, "SELECT * FROM executions WHERE supervisor_pid IS NOT NULL"):
        if row["supervisor_start_ticks"]:
            ident = ProcessIdentity(
                row["supervisor_pid"], row["supervisor_start_ticks"], row["boot_id"]
            )
            if liveness(ident) is Liveness.ALIVE:
                return False
    return True


def make_home(config: str = TEST_CONFIG) -> Home:
    home = Home(short_tmpdir() / "h").ensure()
    (home.root / "config.toml").write_text(config)
    return home


def remove_home(home: Home) -> None:
    kill_leftovers(home)
    kill_processes_naming(home.root.parent)
    shutil.rmtree(home.root.parent, ignore_errors=True)


def raw_socket(home: Home) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(home.socket_path))
    return sock


def pgid_alive(pgid: int) -> bool:
    """Whether any non-zombie process is in process group `pgid` (read from /proc)."""
    from agent_run.supervisor.identity import group_members

    return bool(group_members(pgid))
