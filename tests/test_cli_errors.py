"""CLI error output for what goes wrong in the daemon: one line, never a traceback."""

import json
import sqlite3
from pathlib import Path

from agent_run.system.home import Home
from tests.harness import DaemonProcess, cli


def _break_the_store(home: Home) -> None:
    """A real internal error: the batches table disappears under the running daemon."""
    conn = sqlite3.connect(home.db_path, timeout=30)
    try:
        conn.execute("ALTER TABLE batches RENAME TO batches_gone")
        conn.commit()
    finally:
        conn.close()


def test_an_internal_error_prints_one_json_line_with_the_code_and_the_log_and_exits_1(
    daemon: DaemonProcess, home: Home
) -> None:
    _break_the_store(home)
    result = cli(home, "batch", "list")
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    (line,) = [json.loads(x) for x in result.stdout.splitlines() if x.strip()]
    error = line["error"]
    assert error["code"] == "InternalError"
    assert error["details"]["rpc_code"] == -32603
    assert "no such table" in error["message"]
    log = Path(error["details"]["log"])
    assert log == home.logs_dir / "daemon.log" and "rpc.internal_error" in log.read_text()


def test_an_internal_error_in_text_format_is_one_stderr_line(
    daemon: DaemonProcess, home: Home
) -> None:
    _break_the_store(home)
    result = cli(home, "--format", "text", "batch", "list")
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: InternalError (-32603): ")
    assert f"daemon log: {home.logs_dir / 'daemon.log'}" in line


def test_the_cli_refuses_an_empty_runtime_naming_the_field(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    result = cli(home, "start", "--task", "answer: x", "--workdir", str(workdir), "--runtime", "")
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["field"] == "runtime"


def test_the_cli_still_sends_typed_numbers_and_flags(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    started = cli(
        home,
        "start",
        "--task",
        "answer: typed",
        "--workdir",
        str(workdir),
        "--stall",
        "30",
        "--wall-seconds",
        "60",
        "--wait",
    )
    assert started.returncode == 0, started.stdout + started.stderr
    listed = cli(home, "agents", "--limit", "5", "--offset", "0", "--state", "succeeded")
    assert json.loads(listed.stdout)["total"] == 1
    cleaned = cli(home, "batch", "clean", "bt_zzzz", "--confirm")
    assert json.loads(cleaned.stdout)["error"]["code"] == "BatchNotFound"
