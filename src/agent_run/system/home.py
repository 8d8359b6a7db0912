"""The agent-run home: where config, state, the socket and per-agent files live (0700 / 0600)."""

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOME_ENV = "AGENT_RUN_HOME"
DEFAULT_HOME = "~/.agent-run"
# An agent's worker-tools socket, in its sandbox folder (supervisor/worker_gate.py).
WORKER_SOCKET = "worker.sock"


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def resolve(cls, explicit: str | os.PathLike[str] | None = None) -> "Home":
        raw = explicit or os.environ.get(HOME_ENV) or DEFAULT_HOME
        return cls(Path(raw).expanduser().absolute())

    @property
    def config_path(self) -> Path:
        return self.root / "config.toml"

    @property
    def db_path(self) -> Path:
        return self.root / "state.db"

    @property
    def socket_path(self) -> Path:
        return self.root / "api.sock"

    @property
    def wake_path(self) -> Path:
        """The daemon's datagram socket a supervisor nudges after its commits (store/wake.py)."""
        return self.root / "wake.sock"

    @property
    def lock_path(self) -> Path:
        return self.root / "daemon.lock"

    @property
    def stopped_path(self) -> Path:
        """Present while the daemon stays stopped by `agent-run api stop` (docs/architecture.md)."""
        return self.root / "daemon.stopped"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def agents_dir(self) -> Path:
        return self.root / "agents"

    @property
    def homes_dir(self) -> Path:
        return self.root / "homes"

    @property
    def demos_dir(self) -> Path:
        """The quick start's demo repositories and their worktrees: nothing secret lives here."""
        return self.root / "demos"

    def holds_private(self, folder: Path) -> bool:
        """Whether `folder` is the home or inside it, outside `demos/`: a place holding
        `state.db`, `api.sock`, config, accounts or other agents' files, which no sandbox may
        mount as an agent's workdir, read root or worktree root."""
        home, path = self.root.resolve(), folder.resolve()
        demos = self.demos_dir.resolve()
        if path != home and home not in path.parents:
            return False
        return demos not in path.parents

    def execution_dir(self, agent_id: str, execution_id: str) -> Path:
        return self.agents_dir / agent_id / execution_id

    def sandbox_dir(self, agent_id: str, execution_id: str) -> Path:
        """All an execution's sandbox sees of its folder: the worker socket (`WORKER_SOCKET`)."""
        return self.execution_dir(agent_id, execution_id) / "sandbox"

    def ensure(self) -> "Home":
        """Create the home and its folders 0700; tighten an existing home that is too open, and
        its config.toml to 0600 (the home's files are the user's alone)."""
        for path in (self.root, self.logs_dir, self.agents_dir, self.homes_dir):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            if path.stat().st_mode & 0o077:
                path.chmod(0o700)
        self._tighten_config()
        return self

    def _tighten_config(self) -> None:
        """config.toml holds no secret by design (auth names variables and files), but it names
        key files, hosts and endpoints: a file of ours readable by others is made 0600. A link
        (a dotfiles checkout's file) or another user's file is left as it is: `doctor` flags it."""
        try:
            st = os.lstat(self.config_path)
        except FileNotFoundError:
            return
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(self.config_path, 0o600)


def read_stop_mark(home: Home) -> dict[str, Any] | None:
    """What `agent-run api stop` recorded (pid, time, verb), or None when the daemon was not stopped
    by the user (an unreadable mark still counts as one)."""
    try:
        text = home.stopped_path.read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        mark = json.loads(text)
    except ValueError:
        return {}
    return mark if isinstance(mark, dict) else {}


def write_stop_mark(
    home: Home, pid: int, by: str = "api stop", start_ticks: int | None = None
) -> None:
    """Keep the daemon stopped: autostart (the web UI, MCP sessions) respects this until
    `api serve`, `api restart` or a CLI verb starts one again. `by`: the verb that stopped it
    (`api stop`, or `api restart` until its new daemon serves), for the messages; `pid` and
    `start_ticks`: the process of that verb (a client waits while a restart is under way)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    mark = {"pid": pid, "at": stamp, "by": by, "start_ticks": start_ticks}
    write_private_file(home.stopped_path, json.dumps(mark).encode())


def clear_stop_mark(home: Home) -> bool:
    """Remove the mark; whether there was one."""
    try:
        home.stopped_path.unlink()
    except FileNotFoundError:
        return False
    return True


def write_private_file(path: Path, data: bytes, durable: bool = True) -> None:
    """Write a file 0600 atomically and durably: temp file, every byte written, fsync, rename,
    fsync the directory (without the last step a crash can leave the old name, or none, after
    the rename). On any error (ENOSPC included) the temp file is removed and `path` is left as
    it was: never truncated. `durable=False` skips both fsyncs, for a file written again at
    each use (an engine's config for the launch at hand): still atomic and 0600."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked (a disk filling up mid-write)
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
