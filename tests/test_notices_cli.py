"""Completion notices from the command line, end to end with a real daemon and real receivers:
`start --notify` and `batch start --notify` take the target as a JSON object (inline or
`@FILE`), bad JSON is a usage error naming the field, and `delivery status` renders as text."""

import json
import shutil
from pathlib import Path

from tests.batch_harness import wait_batch
from tests.harness import cli, cli_json, db_rows, wait_for

TEE = shutil.which("tee") or "/usr/bin/tee"


def tee_target(log: Path) -> str:
    return json.dumps({"transport": "command", "argv": [TEE, "-a", str(log)]})


def notices_in(log: Path, n: int) -> list[dict]:
    def arrived():
        lines = log.read_text().splitlines() if log.exists() else []
        return [json.loads(line) for line in lines] if len(lines) >= n else None

    return wait_for(arrived, timeout=60, what=f"{n} notice(s) in {log}")


def test_start_notify_from_the_cli_is_delivered(daemon, home, workdir):
    log = workdir.parent / f"{workdir.name}-cli-notices.log"
    started = cli_json(
        home,
        "start",
        "--task",
        "answer: from the cli",
        "--workdir",
        str(workdir),
        "--notify",
        tee_target(log),
    )
    assert "error" not in started, started
    [notice] = notices_in(log, 1)
    assert notice["agent_id"] == started["id"] and notice["state"] == "succeeded"
    status = cli_json(home, "delivery", "status", started["id"])
    wait_for(
        lambda: cli_json(home, "delivery", "status", started["id"])["state"] == "delivered",
        what="the notice delivered",
    )
    assert status["transport"] == "command"
    log.unlink()


def test_start_notify_from_a_file(daemon, home, workdir):
    log = workdir.parent / f"{workdir.name}-cli-file.log"
    target = workdir.parent / f"{workdir.name}-notify.json"
    target.write_text(tee_target(log))
    started = cli_json(
        home, "start", "--task", "answer: x", "--workdir", str(workdir), "--notify", f"@{target}"
    )
    [notice] = notices_in(log, 1)
    assert notice["agent_id"] == started["id"]
    log.unlink()
    target.unlink()


def test_bad_notify_json_is_a_usage_error_naming_the_field(daemon, home, workdir):
    cases = [
        ('{"transport": "command", "argv": ["x"', "not valid JSON"),
        ('["/usr/bin/tee"]', "a JSON object is wanted"),
        ("@/nonexistent/notify.json", "cannot read"),
    ]
    for value, said in cases:
        result = cli(
            home, "start", "--task", "answer: x", "--workdir", str(workdir), "--notify", value
        )
        assert result.returncode == 64, (value, result.stdout, result.stderr)
        error = json.loads(result.stdout)["error"]
        assert error["code"] == "InvalidParams" and error["field"] == "notify", error
        assert said in error["message"], error
    # Valid JSON the daemon refuses: its typed error names the field inside the target.
    bad = json.dumps({"transport": "command", "argv": []})
    result = cli(home, "start", "--task", "answer: x", "--workdir", str(workdir), "--notify", bad)
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["field"] == "notify.command.argv"
    assert db_rows(home, "SELECT count(*) AS n FROM agents")[0]["n"] == 0
    shown = " ".join(cli(home, "start", "--help").stdout.split())
    assert "--notify JSON" in shown and "(a JSON object, or @FILE holding one)" in shown


def test_batch_start_notify_from_the_cli(batch_project):
    daemon, repo = batch_project.daemon, batch_project.repo
    log = repo.parent / "cli-batch-notices.log"
    batch = cli_json(
        daemon.home,
        "batch",
        "start",
        "--workflow",
        "repeated",
        "--runtime",
        "demo",
        "--project",
        str(repo),
        "--runs",
        "1",
        "--prompt",
        "answer: ok",
        "--notify",
        tee_target(log),
        "--notify-runs",
    )
    assert "error" not in batch, batch
    done = wait_batch(daemon, batch["id"])
    notices = notices_in(log, 2)
    assert {n.get("batch_id") for n in notices} == {None, batch["id"]}
    assert {n.get("agent_id") for n in notices} == {None, done["runs"][0]["agent_id"]}
