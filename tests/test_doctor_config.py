"""`doctor` in the daemon, and `init --detect`, without the real engine CLIs: an engine CLI here
is a small script named like one (an external program, as npm would install it), on a PATH or
under a real npm prefix layout in a fresh HOME (`~/.npm-global/bin`, `~/.nvm/versions/node/*/bin`).
The daemon's PATH and environment are what count; every `auth` (a runtime's and each account's)
is checked, and a key file others can read is refused when config.toml loads."""

import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.config.model import parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.supervisor.secrets import resolve_secrets
from agent_run.system.home import Home
from tests.harness import (
    TEST_CONFIG,
    DaemonProcess,
    cli,
    cli_json,
    make_home,
    remove_home,
    short_tmpdir,
)

BARE_PATH = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
SECRET = "sk-doctor-never-printed-7f3a"
CLAUDE_RUNTIME = (
    '[runtimes.cl]\nengine = "claude"\nmodels = ["claude-sonnet-4-5"]\n'
    '[runtimes.cl.auth]\nenv = "AR_DOCTOR_KEY"\n'
)
USER_CONFIG = (
    "# my own notes: keep these\n" + TEST_CONFIG + "# the demo stays my default\n"
)  # what a user wrote, comments included


def fake_cli(folder: Path, name: str, version: str) -> Path:
    """An executable `name` in `folder` that answers `--version` like an engine CLI."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)
    return path


def _doctor(home: Home, path: str = BARE_PATH, **env: str) -> tuple[dict, dict]:
    result = cli(home, "doctor", env={"PATH": path, **env}, timeout=120)
    report = json.loads(result.stdout)
    assert SECRET not in result.stdout + result.stderr
    assert (result.returncode == 0) == report["ok"]
    return report, {(c["where"], c["check"]): c for c in report["checks"]}


def _daemon(home: Home, path: str, **env: str) -> DaemonProcess:
    return DaemonProcess(home, env={"PATH": path, **env}).start()


@pytest.fixture
def claude_home() -> Iterator[Home]:
    home = make_home(TEST_CONFIG + CLAUDE_RUNTIME)
    yield home
    remove_home(home)


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A fresh HOME for the CLI and the daemon (where the npm prefixes are looked up)."""
    folder = short_tmpdir("aru-")
    yield folder


def test_doctor_reports_the_daemons_path_and_environment_not_the_clis(
    claude_home: Home, user_home: Path
) -> None:
    shell_bin = user_home / "shell-bin"
    fake_cli(shell_bin, "claude", "2.1.0 (Claude Code)")  # on the CLI's PATH only
    daemon = _daemon(claude_home, BARE_PATH, HOME=str(user_home))  # no claude, no key
    try:
        report, checks = _doctor(
            claude_home, f"{shell_bin}:{BARE_PATH}", AR_DOCTOR_KEY=SECRET, HOME=str(user_home)
        )
        assert report["ok"] is False and report["daemon_pid"] == daemon.proc.pid
        binary = checks[("daemon", "runtime cl")]
        assert binary["level"] == "bad" and "the daemon's PATH has no `claude`" in binary["detail"]
        assert "agent-run api restart" in binary["fix"] and "absolute path" in binary["fix"]
        auth = checks[("daemon", "auth cl")]
        assert (
            auth["level"] == "bad"
            and "AR_DOCTOR_KEY is not set in the daemon's environment" in auth["detail"]
        )
        assert checks[("local", "supervisor spawn")]["level"] == "ok"
    finally:
        daemon.stop()


def test_a_spawn_failure_names_the_daemons_path_and_the_fix(
    claude_home: Home, workdir: Path
) -> None:
    daemon = _daemon(claude_home, BARE_PATH, AR_DOCTOR_KEY=SECRET)
    try:
        agent = daemon.call("start", {"task": "hello", "workdir": str(workdir), "runtime": "cl"})
        done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
        execution = done["agent"]["execution"]
        assert execution["failure_kind"] == "spawn_failed", execution
        assert "the daemon's PATH has no `claude`" in execution["failure_message"]
        assert "agent-run api restart" in execution["failure_message"]
        assert "agent-run api restart" in execution["failure_advice"]
    finally:
        daemon.stop()


def test_doctor_warns_when_config_toml_is_readable_by_others(
    daemon: DaemonProcess, home: Home
) -> None:
    home.config_path.chmod(0o644)
    report, checks = _doctor(home)
    warning = checks[("daemon", "config permissions")]
    assert warning["level"] == "warn" and warning["fix"] == f"chmod 600 {home.config_path}"
    home.config_path.chmod(0o600)
    _, checks = _doctor(home)
    assert ("daemon", "config permissions") not in checks


def test_a_config_readable_by_others_is_tightened_when_the_daemon_starts(
    home: Home, tmp_path: Path
) -> None:
    """The daemon makes its home's config.toml 0600, as it makes the home 0700; a config that is
    a link to a file elsewhere is not changed, and doctor flags it."""
    home.config_path.chmod(0o644)
    daemon = _daemon(home, BARE_PATH)
    try:
        assert stat.S_IMODE(home.config_path.stat().st_mode) == 0o600
        _, checks = _doctor(home)
        assert ("daemon", "config permissions") not in checks
    finally:
        daemon.stop()
    shared = tmp_path / "dotfiles-config.toml"
    shared.write_text(home.config_path.read_text())
    shared.chmod(0o644)
    home.config_path.unlink()
    home.config_path.symlink_to(shared)
    daemon = _daemon(home, BARE_PATH)
    try:
        assert stat.S_IMODE(shared.stat().st_mode) == 0o644  # not ours to change
        _, checks = _doctor(home)
        assert checks[("daemon", "config permissions")]["level"] == "warn"
    finally:
        daemon.stop()


def test_doctor_connects_to_each_base_url(home: Home) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    runtime = (
        '[runtimes.{name}]\nengine = "glm"\nmodels = ["glm-4.6"]\nbase_url = "http://127.0.0.1:{port}"\n'
        'allow_plain_http_loopback = true\n[runtimes.{name}.auth]\nenv = "AR_DOCTOR_KEY"\n'
    )
    home.config_path.write_text(
        TEST_CONFIG
        + runtime.format(name="up", port=listener.getsockname()[1])
        + runtime.format(name="down", port=closed_port)
    )
    try:
        _, checks = _doctor(home)
        assert checks[("daemon", "endpoint up")]["level"] == "ok"
        assert checks[("daemon", "endpoint down")]["level"] == "bad"
        assert f"127.0.0.1:{closed_port}" in checks[("daemon", "endpoint down")]["detail"]
    finally:
        listener.close()
        cli(home, "api", "stop")


def test_an_auth_file_readable_by_group_or_others_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(SECRET)
    key.chmod(0o640)
    text = TEST_CONFIG + f'[runtimes.demo.auth]\nfile = "{key}"\n'
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(text)
    assert caught.value.field == "runtimes.demo.auth.file" and "chmod 600" in caught.value.message
    with pytest.raises(ValueError, match="readable by group or others"):
        resolve_secrets({"file": str(key)})
    key.chmod(0o600)
    assert parse_config(text).runtimes["demo"].auth.file == str(key)


def test_an_accounts_auth_file_readable_by_group_or_others_is_refused_at_load(
    home: Home, tmp_path: Path
) -> None:
    key = tmp_path / "work.key"
    key.write_text(SECRET)
    key.chmod(0o644)
    home.config_path.write_text(
        TEST_CONFIG + f'[runtimes.demo.accounts.work.auth]\nfile = "{key}"\n'
    )
    error = cli_json(home, "agents")["error"]  # autostart reads config.toml first
    assert error["code"] == "ConfigInvalid"
    assert error["field"] == "runtimes.demo.accounts.work.auth.file"
    assert f"chmod 600 {key}" in error["message"]
    assert not home.socket_path.exists()
    key.chmod(0o600)
    assert parse_config(home.config_path.read_text()).runtimes["demo"].accounts["work"]


def test_doctor_checks_every_accounts_auth_in_the_daemon(home: Home, tmp_path: Path) -> None:
    key = tmp_path / "spare.key"
    key.write_text(SECRET)
    key.chmod(0o600)
    home.config_path.write_text(
        TEST_CONFIG
        + '[runtimes.demo.accounts.work.auth]\nenv = "AR_WORK_KEY"\n'
        + '[runtimes.demo.accounts.gone.auth]\nenv = "AR_GONE_KEY"\n'
        + f'[runtimes.demo.accounts.spare.auth]\nfile = "{key}"\n'
    )
    daemon = _daemon(home, BARE_PATH, AR_WORK_KEY=SECRET)
    try:
        report, checks = _doctor(home, AR_GONE_KEY=SECRET)  # the CLI's shell is not the daemon's
        assert checks[("daemon", "auth demo/work")]["detail"] == (
            "AR_WORK_KEY is set in the daemon's environment"
        )
        gone = checks[("daemon", "auth demo/gone")]
        assert gone["level"] == "bad" and "AR_GONE_KEY is not set in the daemon's" in gone["detail"]
        assert checks[("daemon", "auth demo/spare")]["level"] == "ok"
        assert report["ok"] is False
        key.chmod(0o644)  # after the config loaded: the daemon keeps it, doctor sees the file
        _, checks = _doctor(home)
        spare = checks[("daemon", "auth demo/spare")]
        assert (
            spare["level"] == "bad" and "readable by group or others (mode 644)" in spare["detail"]
        )
        assert spare["fix"] == f"chmod 600 {key}"
    finally:
        daemon.stop()


def test_init_detect_finds_engines_in_npm_prefixes_and_adds_only_what_is_missing(
    home: Home, user_home: Path
) -> None:
    codex = fake_cli(user_home / ".npm-global" / "bin", "codex", "codex-cli 0.0.0-fake")
    fake_cli(user_home / ".nvm" / "versions" / "node" / "v9.0.0" / "bin", "qwen", "0.0.1")
    qwen = fake_cli(user_home / ".nvm" / "versions" / "node" / "v20.11.1" / "bin", "qwen", "0.2.0")
    env = {"PATH": BARE_PATH, "HOME": str(user_home)}  # neither CLI is on PATH
    home.config_path.write_text(USER_CONFIG)
    daemon = _daemon(home, BARE_PATH, HOME=str(user_home))
    try:
        _, checks = _doctor(home, **env)
        unconfigured = checks[("daemon", "unconfigured codex")]
        assert unconfigured["level"] == "warn" and str(codex) in unconfigured["detail"]
        assert "`agent-run init --detect`" in unconfigured["fix"]
        assert str(qwen) in checks[("daemon", "unconfigured qwen")]["detail"]  # the newest nvm

        added = cli_json(home, "init", "--detect", env=env)
        assert added["added"] == ["codex", "qwen"], added
        text = home.config_path.read_text()
        assert text.startswith(USER_CONFIG)  # what the user wrote, byte for byte
        config = parse_config(text)
        assert config.runtimes["codex"].binary == str(codex) and config.runtimes["codex"].enabled
        assert config.runtimes["qwen"].binary == str(qwen)
        again = cli(home, "--format", "text", "init", "--detect", env=env)
        assert again.returncode == 0 and "nothing to add" in again.stdout, again
        assert home.config_path.read_text() == text

        _, checks = _doctor(home, **env)  # the daemon reloads the file on `doctor`
        assert not [check for check in checks if check[1].startswith("unconfigured")], checks
        assert checks[("daemon", "runtime codex")]["detail"] == f"{codex}: codex-cli 0.0.0-fake"
    finally:
        daemon.stop()


def test_init_detect_refuses_an_invalid_config_and_leaves_it_as_it_was(
    home: Home, user_home: Path
) -> None:
    fake_cli(user_home / ".npm-global" / "bin", "codex", "codex-cli 0.0.0-fake")
    broken = USER_CONFIG + "[runtimes.demo.auth]\nenv = 'not a name'\n"
    home.config_path.write_text(broken)
    result = cli(home, "init", "--detect", env={"PATH": BARE_PATH, "HOME": str(user_home)})
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "ConfigInvalid" and error["field"] == "runtimes.demo.auth.env"
    assert home.config_path.read_text() == broken


def test_init_detect_in_a_fresh_home_writes_the_engines_found_enabled(user_home: Path) -> None:
    path_bin = user_home / "bin"
    codex = fake_cli(path_bin, "codex", "codex-cli 0.0.0-fake")
    qwen = fake_cli(user_home / ".npm-global" / "bin", "qwen", "0.2.0")
    env = {"PATH": f"{path_bin}:{BARE_PATH}", "HOME": str(user_home)}
    home = Home(short_tmpdir() / "h")
    try:
        result = cli(home, "--format", "text", "init", "--detect", env=env)
        assert result.returncode == 0, result
        # it says which runtimes it enabled, and with which binary
        assert result.stdout.splitlines() == [
            f"wrote {home.config_path}",
            f"enabled runtime(s): codex ({codex}), demo, qwen ({qwen})",
        ]
        assert cli_json(Home(short_tmpdir() / "h"), "init", "--detect", env=env)["enabled"] == [
            "codex",
            "demo",
            "qwen",
        ]
        config = parse_config(home.config_path.read_text())
        assert config.runtimes["codex"].enabled and config.runtimes["codex"].binary == str(codex)
        assert config.runtimes["qwen"].binary == str(qwen)
        plain = Home(short_tmpdir() / "h")
        said = cli(plain, "--format", "text", "init", env=env).stdout.splitlines()
        assert set(parse_config(plain.config_path.read_text()).runtimes) == {"demo"}
        assert said[1:] == [
            "enabled runtime(s): demo",
            f"found, left commented out: codex ({codex}), qwen ({qwen}); "
            "`agent-run init --detect` enables them",
        ]
        refused = cli_json(plain, "init", env=env)["error"]
        assert (
            refused["field"] == "config" and "`agent-run init --detect` adds" in refused["message"]
        )
    finally:
        remove_home(home)
