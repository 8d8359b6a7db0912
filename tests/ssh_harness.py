"""A real OpenSSH server on 127.0.0.1 and a second Unix user as the "remote host", for the tests
marked `sshd` (scripts/bootstrap --with-sshd installs Debian's openssh-server).

Per test session (and xdist worker: the sshd tests share the group "sshd", so one worker): a
Unix user made with `useradd` (the suite runs as root), its own agent-run home, agent-run
installed into a venv that user owns (the project's wheel, built with `uv build`, installed with
the system python3 and the project's locked dependencies), a client key, a throwaway host key,
and sshd started from its own sshd_config on a free port (no system service). The local side's
ssh reads a generated ssh config file (`[hosts.NAME] ssh_config`): the key, the known host key
(`StrictHostKeyChecking yes` against a generated known_hosts), batch mode.

To cut the host off, `cut_off()` stops sshd and kills its live session processes (found as the
children of the sshd we started, by pid); `restore()` starts it again on the same port.
"""

import os
import pwd
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import wait_for

REPO = Path(__file__).resolve().parent.parent
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SYSTEM_PYTHON = "/usr/bin/python3"

REMOTE_CONFIG = """schema_version = 1
default_runtime = "demo"
[supervisor]
stall_seconds = 60.0
cancel_grace_seconds = 1.0
[daemon]
reconcile_interval_seconds = 0.2
[runtimes.demo]
engine = "demo"
models = ["demo-1"]
default_model = "demo-1"
sandbox = "none"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (read from /proc)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _pids_of(uid: int) -> list[int]:
    """The live processes of a user (zombies, whose parent reaps them, are not counted)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if (
                entry.stat().st_uid == uid
                and " Z " not in Path(f"/proc/{entry.name}/stat").read_text()
            ):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


@dataclass
class RemoteHost:
    """The second Unix user behind a real sshd on 127.0.0.1."""

    user: str
    user_home: Path
    keys: Path  # root's folder: keys, known_hosts, ssh and sshd configs, sshd's log
    port: int
    sshd: subprocess.Popen[bytes] | None = None
    extra_homes: list[Path] = field(default_factory=list)

    @property
    def venv(self) -> Path:
        return self.user_home / "venv"

    @property
    def agent_run(self) -> Path:
        return self.venv / "bin" / "agent-run"

    @property
    def home(self) -> Path:
        """The user's agent-run home (its default, ~/.agent-run)."""
        return self.user_home / ".agent-run"

    @property
    def ssh_config(self) -> Path:
        return self.keys / "ssh_config"

    def host_toml(self, name: str = "box", **extra: str) -> str:
        """A `[hosts.NAME]` table for the local config (agent-run on the user's venv)."""
        lines = [
            f"[hosts.{name}]",
            f'ssh = "{self.user}@127.0.0.1:{self.port}"',
            f'ssh_config = "{self.ssh_config}"',
            f'agent_run = ["{self.agent_run}"]',
            *(f"{key} = {value}" for key, value in extra.items()),
        ]
        return "\n".join(lines) + "\n"

    def as_user(self, *argv: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """`argv` run as the remote user, in its home, with its own environment."""
        env = {"HOME": str(self.user_home), "PATH": "/usr/bin:/bin", "USER": self.user}
        return subprocess.run(
            ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--init-groups", *argv],
            cwd=self.user_home,
            env=env,
            capture_output=True,
            text=True,
            input=input,
            timeout=120,
        )

    def ssh(self, command: str) -> subprocess.CompletedProcess[str]:
        """One command over ssh, as the local side runs it."""
        return subprocess.run(
            [
                "ssh",
                "-F",
                str(self.ssh_config),
                "-p",
                str(self.port),
                f"{self.user}@127.0.0.1",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """The host's own store, read directly (as root: tests only)."""
        conn = sqlite3.connect(self.home / "state.db", timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    # -- sshd --------------------------------------------------------------------------------

    def start_sshd(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation folder
        log = open(self.keys / "sshd.log", "ab")
        self.sshd = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.keys / "sshd_config")],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

        def answers() -> bool:
            assert self.sshd is not None
            if self.sshd.poll() is not None:
                raise AssertionError(
                    f"sshd exited {self.sshd.returncode}: {(self.keys / 'sshd.log').read_text()[-1500:]}"
                )
            return self.ssh("true").returncode == 0

        wait_for(answers, timeout=30, interval=0.1, what="sshd to let the remote user in")

    def session_pids(self) -> list[int]:
        """sshd's live sessions: the sshd processes it forked for each connection. Not what runs
        under them: the host's daemon (autostarted by a bridge, in its own session) and its
        supervisors are the host's, not the connection's, and a cut network does not kill them."""
        if self.sshd is None:
            return []
        return [pid for pid in _descendants(self.sshd.pid) if _comm(pid) == "sshd"]

    def cut_off(self) -> None:
        """Stop sshd and kill its live sessions: every connection to the host ends at once (the
        bridges under them see the end of their input and exit)."""
        assert self.sshd is not None
        sessions = self.session_pids()
        self.sshd.terminate()
        self.sshd.wait(timeout=10)
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.sshd = None

    def restore(self) -> None:
        self.start_sshd()

    def stop(self) -> None:
        if self.sshd is not None:
            self.cut_off()


def _build_venv(user: str, user_home: Path, build_dir: Path) -> None:
    """The project's wheel in a venv the user owns, made with the system python3 and the
    project's locked dependencies (the user cannot use the project's .venv)."""
    uv = _run([str(REPO / "scripts" / "find-uv")]).stdout.strip()
    _run([uv, "build", "--wheel", "--out-dir", str(build_dir), "-q"], cwd=REPO)
    wheel = next(build_dir.glob("agent_run-*.whl"))
    requirements = build_dir / "requirements.txt"
    _run(
        [
            uv,
            "export",
            "--frozen",
            "--no-dev",
            "--no-hashes",
            "--no-emit-project",
            "-q",
            "-o",
            str(requirements),
        ],
        cwd=REPO,
    )
    venv = user_home / "venv"
    _run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)])
    # Copied (not hard-linked) out of root's uv cache, then handed to the user.
    _run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            "--link-mode",
            "copy",
            "-r",
            str(requirements),
            str(wheel),
        ]
    )
    _run(["chown", "-R", f"{user}:{user}", str(venv)])


def _keys_and_configs(host: RemoteHost) -> None:
    keys = host.keys
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host_key")])
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "client_key")])
    ssh_dir = host.user_home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "authorized_keys").write_text((keys / "client_key.pub").read_text())
    (ssh_dir / "authorized_keys").chmod(0o600)
    _run(["chown", "-R", f"{host.user}:{host.user}", str(ssh_dir)])
    host_pub = (keys / "host_key.pub").read_text().split()
    (keys / "known_hosts").write_text(f"[127.0.0.1]:{host.port} {host_pub[0]} {host_pub[1]}\n")
    (keys / "sshd_config").write_text(
        f"Port {host.port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host_key'}\n"
        f"PidFile {keys / 'sshd.pid'}\nAuthorizedKeysFile .ssh/authorized_keys\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nPermitRootLogin no\nAllowUsers {host.user}\nStrictModes yes\n"
        "X11Forwarding no\nAllowTcpForwarding no\nPrintMotd no\nLogLevel VERBOSE\n"
    )
    (keys / "ssh_config").write_text(
        "Host 127.0.0.1\n"
        f"  IdentityFile {keys / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {keys / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n  LogLevel ERROR\n"
    )


def _remote_home(host: RemoteHost) -> None:
    done = host.as_user(str(host.agent_run), "init")
    assert done.returncode == 0, done.stderr
    done = host.as_user("sh", "-c", "cat > .agent-run/config.toml", input=REMOTE_CONFIG)
    assert done.returncode == 0, done.stderr


def make_remote_host() -> RemoteHost:
    if not Path(SSHD).exists():
        pytest.fail("no sshd: run `scripts/bootstrap --with-sshd` (Debian's openssh-server)")
    if os.geteuid() != 0:
        pytest.fail("the sshd tests make a Unix user: run them as root (CI does)")
    user = f"arr{secrets.token_hex(3)}"
    user_home = Path(f"/tmp/{user}")
    _run(["useradd", "--home-dir", str(user_home), "--create-home", "--shell", "/bin/sh", user])
    _run(["usermod", "-p", "*", user])  # no password, but not a locked account (sshd refuses those)
    user_home.chmod(0o700)
    keys = Path(f"/tmp/{user}-keys")
    keys.mkdir(mode=0o700)
    host = RemoteHost(user, user_home, keys, _free_port())
    _build_venv(user, user_home, keys)
    _keys_and_configs(host)
    _remote_home(host)
    host.start_sshd()
    return host


def remove_remote_host(host: RemoteHost) -> None:
    host.stop()
    host.as_user(str(host.agent_run), "api", "stop")
    try:
        uid = pwd.getpwnam(host.user).pw_uid
    except KeyError:
        uid = None
    if uid is not None:  # the host's supervisors and engines: the processes of its user
        for pid in _pids_of(uid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # userdel refuses a user that still has processes: wait until the kills have landed.
        wait_for(lambda: not _pids_of(uid), timeout=30, what="the host user's processes to end")
    done = subprocess.run(
        ["userdel", "--force", "--remove", host.user], capture_output=True, text=True
    )
    assert done.returncode in (0, 12), f"userdel {host.user}: {done.stderr}"  # 12: no home left
    shutil.rmtree(host.user_home, ignore_errors=True)
    shutil.rmtree(host.keys, ignore_errors=True)


@pytest.fixture(scope="session")
def remote_host() -> Iterator[RemoteHost]:
    """The session's remote host (sshd, its user, agent-run installed there)."""
    host = make_remote_host()
    try:
        yield host
    finally:
        remove_remote_host(host)


@pytest.fixture
def reachable(remote_host: RemoteHost) -> Iterator[RemoteHost]:
    """The remote host with sshd running at the start and the end of the test."""
    if remote_host.sshd is None:
        remote_host.restore()
    yield remote_host
    if remote_host.sshd is None:
        remote_host.restore()


def local_config(host: RemoteHost, name: str = "box") -> str:
    from tests.harness import TEST_CONFIG

    return TEST_CONFIG + "\n" + host.host_toml(name)


__all__ = ["RemoteHost", "local_config", "reachable", "remote_host"]
