"""Service definitions: golden files (the interpreter path replaced by a placeholder), a label
and unit name unique per home, a plist that plistlib reads, a unit `systemd-analyze verify`
accepts (skipped, saying why, where the binary is absent)."""

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_run.cli.service_files import (
    launchd_label,
    launchd_plist,
    systemd_unit,
    systemd_unit_name,
)
from agent_run.system.home import Home
from tests.harness import check_golden, short_tmpdir

FIXED_HOME = Home(Path("/home/ada/.agent-run"))


def _golden(name: str, text: str) -> None:
    check_golden(name, text.replace(sys.executable, "{python}"))


def test_launchd_plist_matches_its_golden_file() -> None:
    _golden("service_launchd.plist", launchd_plist(FIXED_HOME))


def test_systemd_unit_matches_its_golden_file() -> None:
    _golden("service_systemd.service", systemd_unit(FIXED_HOME))


def test_two_homes_get_different_labels_and_unit_names() -> None:
    other = Home(Path("/home/ada/work-home"))
    assert launchd_label(FIXED_HOME) != launchd_label(other)
    assert systemd_unit_name(FIXED_HOME) != systemd_unit_name(other)
    plist = plistlib.loads(launchd_plist(other).encode())
    assert plist["Label"] == launchd_label(other)
    assert (
        f"launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/{launchd_label(other)}.plist"
        in launchd_plist(other)
    )
    assert "load -w" not in launchd_plist(other)
    assert systemd_unit_name(other) in systemd_unit(other)


def test_systemd_analyze_verify_accepts_the_unit() -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip(
            "systemd-analyze is not installed (apt package `systemd`): "
            "the unit is checked by its golden file only"
        )
    folder = short_tmpdir("aru-")
    try:
        home = Home(folder / "my home")
        unit = folder / systemd_unit_name(home)
        unit.write_text(systemd_unit(home))
        done = subprocess.run(
            [analyze, "verify", str(unit)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
        )
        problems = [
            line for line in done.stderr.splitlines() if str(unit) in line or "ExecStart" in line
        ]
        assert done.returncode == 0 and not problems, done.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)
