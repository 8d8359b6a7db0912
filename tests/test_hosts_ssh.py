"""The link to a host over a real sshd on 127.0.0.1 (tests/ssh_harness.py): `ssh HOST
agent-run api bridge`, the version check at connect, an unreachable host as a typed error."""

import fcntl
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run import __version__
from tests.harness import TEST_CONFIG, DaemonProcess, make_home, remove_home
from tests.ssh_harness import RemoteHost, local_config, reachable, remote_host  # noqa: F401

pytestmark = [pytest.mark.sshd, pytest.mark.xdist_group("sshd")]


@pytest.fixture
def host_daemon(reachable: RemoteHost) -> Iterator[DaemonProcess]:  # noqa: F811
    home = make_home(local_config(reachable))
    daemon = DaemonProcess(home).start()
    yield daemon
    daemon.stop()
    remove_home(home)


def test_hosts_check_connects_through_the_bridge_and_starts_the_hosts_daemon(
    host_daemon: DaemonProcess,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    result = host_daemon.call("hosts", {"check": True})
    [box] = result["items"]
    assert box["connected"], box
    assert box["version"] == __version__ and box["remote_home"] == str(reachable.home)
    assert box["last_error"] is None
    # The host's daemon runs as the host's user, from its own venv, in its own home.
    proc = Path(f"/proc/{box['daemon_pid']}")
    assert proc.stat().st_uid == pwd.getpwnam(reachable.user).pw_uid
    assert str(reachable.venv) in (proc / "cmdline").read_text()
    assert (reachable.home / "api.sock").exists()


def daemon_lock_free(home: Path) -> bool:
    """Whether no daemon holds the home's lock (the kernel drops it when the daemon ends)."""
    try:
        fd = os.open(home / "daemon.lock", os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def old_agent_run(host: RemoteHost) -> str:
    """A copy of the host's agent-run with another version, as its user can run it."""
    site = next(host.venv.glob("lib/python3*/site-packages"))
    old = host.user_home / "old"
    if not old.exists():
        shutil.copytree(site / "agent_run", old / "agent_run")
        init = old / "agent_run" / "__init__.py"
        text = init.read_text().replace(f'__version__ = "{__version__}"', '__version__ = "0.0.9"')
        assert "0.0.9" in text
        init.write_text(text)
        subprocess.run(["chown", "-R", f"{host.user}:{host.user}", str(old)], check=True)
    return f'["/usr/bin/env", "PYTHONPATH={old}", "{host.venv}/bin/python", "-m", "agent_run"]'


def test_another_version_on_the_host_is_refused_at_connect_with_a_typed_error(
    reachable: RemoteHost,  # noqa: F811
) -> None:
    config = (
        TEST_CONFIG
        + "\n"
        + reachable.host_toml("old").replace(
            f'agent_run = ["{reachable.agent_run}"]', f"agent_run = {old_agent_run(reachable)}"
        )
    )
    reachable.as_user(str(reachable.agent_run), "api", "stop")  # no daemon runs on the host
    home = make_home(config)
    daemon = DaemonProcess(home).start()
    try:
        [old] = daemon.call("hosts", {"check": True})["items"]
        assert not old["connected"]
        assert old["last_error_code"] == "HostVersionMismatch", old
        assert "0.0.9" in old["last_error"] and __version__ in old["last_error"]
        # Refused before the bridge did anything: it started no daemon on the host.
        assert daemon_lock_free(reachable.home)
    finally:
        daemon.stop()
        remove_home(home)


def test_a_host_whose_sshd_is_down_is_unreachable_with_ssh_s_own_words(
    reachable: RemoteHost,  # noqa: F811
) -> None:
    config = (
        TEST_CONFIG
        + "\n"
        + reachable.host_toml("down").replace(
            f":{reachable.port}", f":{reachable.port + 1 if reachable.port < 65535 else 1}"
        )
    )
    home = make_home(config)
    daemon = DaemonProcess(home).start()
    try:
        [down] = daemon.call("hosts", {"check": True})["items"]
        assert not down["connected"] and down["last_error_code"] == "HostUnreachable", down
        assert "Connection refused" in down["last_error"], down["last_error"]
    finally:
        daemon.stop()
        remove_home(home)
