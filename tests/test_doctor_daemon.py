"""`doctor` runs in the daemon: the daemon's PATH, environment and config, not the CLI's. Daemons
are started with a PATH that differs from the CLI's on purpose; engine CLIs are the pinned real
ones in node_modules/.bin."""

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.config import parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.home import Home
from agent_run.supervisor.secrets import resolve_secrets
from tests.harness import TEST_CONFIG, DaemonProcess, cli, make_home, remove_home, short_tmpdir

pytestmark = pytest.mark.engines  # runs the real engine CLIs (`--version`) from node_modules

ENGINE_BIN = str(Path(__file__).resolve().parent.parent / "node_modules" / ".bin")
BARE_PATH = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
SECRET = "sk-doctor-never-printed-7f3a"
CLAUDE_RUNTIME = (
    '[runtimes.cl]\nengine = "claude"\nmodels = ["claude-sonnet-4-5"]\n'
    '[runtimes.cl.auth]\nenv = "AR_DOCTOR_KEY"\n'
)


def _doctor(home: Home, **env: str) -> tuple[dict, dict]:
    result = cli(
        home, "doctor", env={"PATH": ENGINE_BIN + os.pathsep + BARE_PATH, **env}, timeout=120
    )
    report = json.loads(result.stdout)
    assert SECRET not in result.stdout + result.stderr
    assert (result.returncode == 0) == report["ok"]
    return report, {(c["where"], c["check"]): c for c in report["checks"]}


@pytest.fixture
def claude_home() -> Iterator[Home]:
    home = make_home(TEST_CONFIG + CLAUDE_RUNTIME)
    yield home
    remove_home(home)


def _daemon(home: Home, path: str, **env: str) -> DaemonProcess:
    return DaemonProcess(home, env={"PATH": path, **env}).start()


def test_doctor_reports_the_daemons_path_and_environment_not_the_clis(claude_home: Home) -> None:
    daemon = _daemon(claude_home, BARE_PATH)  # no engine CLIs, no key: the CLI's shell has both
    try:
        report, checks = _doctor(claude_home, AR_DOCTOR_KEY=SECRET)
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


def test_doctor_reports_the_binary_version_and_that_the_key_is_set_never_its_value(
    claude_home: Home,
) -> None:
    daemon = _daemon(claude_home, ENGINE_BIN + os.pathsep + BARE_PATH, AR_DOCTOR_KEY=SECRET)
    try:
        report, checks = _doctor(claude_home)
        binary = checks[("daemon", "runtime cl")]
        assert binary["level"] == "ok" and binary["detail"].startswith(ENGINE_BIN + "/claude")
        assert "Claude Code" in binary["detail"]  # its --version line
        assert (
            checks[("daemon", "auth cl")]["detail"]
            == "AR_DOCTOR_KEY is set in the daemon's environment"
        )
        assert checks[("daemon", "engine home cl")]["level"] == "ok"
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


def test_doctor_lists_installed_unconfigured_engines_with_the_block_that_enables_them(
    home: Home,
) -> None:
    daemon = _daemon(home, ENGINE_BIN + os.pathsep + BARE_PATH)
    try:
        report, checks = _doctor(home)
        codex = checks[("daemon", "unconfigured codex")]
        assert codex["level"] == "warn" and report["ok"] is True  # a warning, not a failure
        block = codex["fix"].split("\n(or ")[0]
        config = parse_config(TEST_CONFIG + block + "\n")
        assert config.runtimes["codex"].binary == ENGINE_BIN + "/codex"
        assert ("daemon", "unconfigured demo") not in checks
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


def test_init_detect_writes_the_engines_found_enabled() -> None:
    home = Home(short_tmpdir() / "h")
    try:
        result = cli(home, "init", "--detect", env={"PATH": ENGINE_BIN + os.pathsep + BARE_PATH})
        assert result.returncode == 0, result.stderr
        config = parse_config(home.config_path.read_text())
        assert (
            config.runtimes["codex"].enabled
            and config.runtimes["codex"].binary == ENGINE_BIN + "/codex"
        )
        assert config.runtimes["qwen"].binary == ENGINE_BIN + "/qwen"
        plain = Home(short_tmpdir() / "h")
        cli(plain, "init", env={"PATH": ENGINE_BIN + os.pathsep + BARE_PATH})
        assert set(parse_config(plain.config_path.read_text()).runtimes) == {"demo"}
        remove_home(plain)
    finally:
        remove_home(home)


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
    assert resolve_secrets({"file": str(key)}) == {"AGENT_RUN_API_KEY": SECRET}
