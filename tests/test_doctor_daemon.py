"""`doctor` runs in the daemon, with the pinned real engine CLIs of node_modules/.bin on its
PATH: their `--version`, and those installed but not configured. (What needs no engine CLI is in
tests/test_doctor_config.py, outside the `engines` slice.)"""

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.config.model import parse_config
from agent_run.system.home import Home
from tests.harness import TEST_CONFIG, DaemonProcess, cli, make_home, remove_home

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


def test_doctor_lists_installed_unconfigured_engines_with_the_block_that_enables_them(
    home: Home,
) -> None:
    daemon = _daemon(home, ENGINE_BIN + os.pathsep + BARE_PATH)
    try:
        report, checks = _doctor(home)
        codex = checks[("daemon", "unconfigured codex")]
        assert codex["level"] == "warn" and report["ok"] is True  # a warning, not a failure
        block = codex["fix"].split("\n(")[0]
        config = parse_config(TEST_CONFIG + block + "\n")
        assert config.runtimes["codex"].binary == ENGINE_BIN + "/codex"
        assert ("daemon", "unconfigured demo") not in checks
    finally:
        daemon.stop()
