"""The daemon's lifecycle: `api stop` / `restart` / `status` against a real daemon process, and
config.toml edited under it (reloaded on admission and SIGHUP, a bad file refused and the last
good one kept, batches keeping their settings), `api serve` and autostart with a bad config."""

import json
import os
import signal

from agent_run.supervisor.identity import Liveness, ProcessIdentity, liveness
from agent_run.system.home import Home
from tests.batch_harness import make_repo, runs_of, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, cli, cli_json, db_rows, wait_for

OTHER_RUNTIME = '[runtimes.other]\nengine = "demo"\nmodels = ["demo-1"]\ndefault_model = "demo-1"\n'


def _supervisor(home: Home, agent_id: str) -> ProcessIdentity:
    row = wait_for(
        lambda: next(
            iter(
                db_rows(
                    home,
                    "SELECT * FROM executions WHERE agent_id = ? AND supervisor_pid IS NOT NULL",
                    (agent_id,),
                )
            ),
            None,
        ),
        what="the supervisor to record itself",
    )
    return ProcessIdentity(row["supervisor_pid"], row["supervisor_start_ticks"], row["boot_id"])


def test_api_stop_ends_the_daemon_and_leaves_running_agents_running(
    daemon: DaemonProcess, home: Home, workdir
) -> None:
    # It runs until the test lets it end (a flag file), however slow the machine is.
    task = "shell: while [ ! -e go.flag ]; do sleep 0.05; done\nanswer: survived"
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    supervisor = _supervisor(home, agent["id"])
    stopped = cli_json(home, "api", "stop")
    assert stopped["stopped"] is True and stopped["pid"] == daemon.proc.pid
    assert stopped["live_agents"] == 1
    assert "keep running under their own supervisors" in stopped["message"]
    assert daemon.proc.wait(timeout=30) == 0
    assert not home.socket_path.exists()
    assert liveness(supervisor) is Liveness.ALIVE
    restarted = cli_json(home, "api", "restart")
    assert restarted["stopped"] is None and restarted["pid"] != daemon.proc.pid
    (workdir / "go.flag").touch()
    done = cli_json(home, "wait", agent["id"], "--timeout-seconds", "60")
    assert done["agent"]["state"] == "succeeded", done
    assert cli_json(home, "answer", agent["id"])["text"].strip() == "survived"
    assert cli_json(home, "api", "stop")["pid"] == restarted["pid"]


def test_api_stop_without_a_daemon_says_so_and_starts_none(home: Home) -> None:
    result = cli(home, "api", "stop")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["stopped"] is False and answer["message"].startswith("no daemon was running;")
    assert not home.socket_path.exists()


def test_api_status_reports_the_daemon_its_config_revision_and_live_agents(
    daemon: DaemonProcess, home: Home, workdir
) -> None:
    import hashlib

    status = cli_json(home, "api", "status")
    assert status["pid"] == daemon.proc.pid and status["home"] == str(home.root)
    assert status["config_revision"] == hashlib.sha256(TEST_CONFIG.encode()).hexdigest()[:12]
    assert (
        status["config_refused"] is None
        and status["live_agents"] == 0
        and status["uptime_seconds"] >= 0
    )
    agent = daemon.call("start", {"task": "sleep: 30", "workdir": str(workdir)})
    assert cli_json(home, "api", "status")["live_agents"] == 1
    daemon.call("cancel", {"agent_id": agent["id"]})


def test_a_runtime_added_to_config_toml_is_usable_without_a_restart(
    daemon: DaemonProcess, home: Home, workdir
) -> None:
    refused = cli_json(
        home, "start", "--task", "answer: x", "--workdir", str(workdir), "--runtime", "other"
    )
    assert refused["error"]["code"] == "UnknownRuntime"
    home.config_path.write_text(TEST_CONFIG + OTHER_RUNTIME)
    agent = cli_json(
        home, "start", "--task", "answer: x", "--workdir", str(workdir), "--runtime", "other"
    )
    assert agent["runtime"] == "other", agent
    assert cli_json(home, "api", "status")["pid"] == daemon.proc.pid  # the same daemon took it


def test_an_invalid_edit_is_refused_with_its_field_and_the_last_good_config_kept(
    daemon: DaemonProcess, home: Home, workdir
) -> None:
    good = cli_json(home, "api", "status")["config_revision"]
    home.config_path.write_text(TEST_CONFIG + OTHER_RUNTIME + 'modelz = ["x"]\n')
    agent = cli_json(home, "start", "--task", "answer: still", "--workdir", str(workdir))
    assert agent["runtime"] == "demo"  # admitted under the last good config
    status = cli_json(home, "api", "status")
    assert status["config_revision"] == good
    assert status["config_refused"]["field"] == "runtimes.other.modelz"
    doctor = cli_json(home, "doctor")
    reload_check = next(c for c in doctor["checks"] if c["check"] == "config reload")
    assert reload_check["level"] == "bad" and "runtimes.other.modelz" in reload_check["detail"]
    assert doctor["ok"] is False
    text = cli(home, "api", "status", "--format", "text").stdout
    assert (
        f"REFUSED config revision {status['config_refused']['revision']}" in text and good in text
    )
    home.config_path.write_text(TEST_CONFIG + OTHER_RUNTIME)
    fixed = cli_json(home, "api", "status")
    assert fixed["config_refused"] is None and fixed["config_revision"] != good
    assert "config.refused" in (home.logs_dir / "daemon.log").read_text()


def test_sighup_reloads_config_toml_without_any_call(daemon: DaemonProcess, home: Home) -> None:
    home.config_path.write_text(TEST_CONFIG + OTHER_RUNTIME)
    os.kill(daemon.proc.pid, signal.SIGHUP)
    log = home.logs_dir / "daemon.log"
    wait_for(lambda: "config.reloaded" in log.read_text(), what="the daemon to log the reload")


def test_a_live_batch_keeps_the_runtime_settings_it_was_created_with(
    daemon: DaemonProcess, home: Home
) -> None:
    repo = make_repo()
    batch_revision = daemon.call("status")["config_revision"]
    batch = daemon.call(
        "batch_start",
        {
            "runtime": "demo",
            "workflow": "repeated",
            "project": str(repo),
            "runs": 2,
            "concurrency": 1,
            "prompt": "sleep: 6\nanswer: done",
        },
    )
    # Runtime `demo` goes away while the first run works and the second waits its turn.
    home.config_path.write_text(
        TEST_CONFIG.replace("[runtimes.demo]", "[runtimes.other]").replace(
            'default_runtime = "demo"', 'default_runtime = "other"'
        )
    )
    status = daemon.call("status")
    assert status["config_refused"] is None and status["config_revision"] != batch_revision
    waiting = daemon.call("batch", {"batch_id": batch["id"]})
    assert sum(run["agent_id"] is None for run in runs_of(waiting, "worker")) == 1, waiting
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "completed", done
    for run in runs_of(done, "worker"):
        assert daemon.call("agent", {"agent_id": run["agent_id"]})["runtime"] == "demo"


def test_api_serve_with_a_bad_config_names_the_field_and_makes_nothing_in_the_home(
    home: Home,
) -> None:
    for child in home.root.iterdir():
        if child.is_dir():
            child.rmdir()
    home.config_path.write_text(TEST_CONFIG.replace("stall_seconds = 60.0", "stall_seconds = -1"))
    result = cli(home, "api", "serve", timeout=60)
    assert result.returncode == 1  # an error, never 2 (a wait's failed/lost)
    assert "error: ConfigInvalid [supervisor.stall_seconds]: " in result.stderr
    assert sorted(p.name for p in home.root.iterdir()) == ["config.toml"]
    as_json = cli(home, "--format", "json", "api", "serve", timeout=60)
    error = json.loads(as_json.stdout)["error"]
    assert as_json.returncode == 1 and error["field"] == "supervisor.stall_seconds"


def test_autostart_with_a_bad_config_is_config_invalid_with_its_field(home: Home) -> None:
    home.config_path.write_text(TEST_CONFIG + '[runtimes.demo.auth]\nenv = "sk-live-abc"\n')
    error = cli_json(home, "agents")["error"]
    assert error["code"] == "ConfigInvalid" and error["field"] == "runtimes.demo.auth.env"
    assert not home.socket_path.exists()


def test_a_daemon_of_another_version_is_refused_with_the_command_that_fixes_it(
    home: Home, tmp_path
) -> None:
    """After an upgrade the old daemon may still run: a verb is refused (exit 1, nothing sent)
    naming both versions and `agent-run api restart`; `api status` still answers, and after the
    restart every verb works."""
    (tmp_path / "sitecustomize.py").write_text(
        "import agent_run\nagent_run.__version__ = '0.0.1-old'\n"
    )
    old = DaemonProcess(home, env={"PYTHONPATH": str(tmp_path)}).start()
    try:
        refused = cli_json(home, "agents")
        error = refused["error"]
        assert error["code"] == "DaemonVersionMismatch", refused
        assert "0.0.1-old" in error["message"] and "`agent-run api restart`" in error["message"]
        assert error["details"]["remote"] == "0.0.1-old"
        status = cli(home, "api", "status")
        assert status.returncode == 0 and "runs agent-run 0.0.1-old" in status.stderr
        assert cli_json(home, "api", "restart")["pid"] != old.proc.pid
        again = cli(home, "agents")
        assert again.returncode == 0 and "0.0.1-old" not in again.stderr
    finally:
        old.stop()
        cli(home, "api", "stop")
