"""The daemon's lifecycle: `api stop` / `restart` / `status` against a real daemon process, and
config.toml edited under it (reloaded on admission and SIGHUP, a bad file refused and the last
good one kept, batches keeping their settings), `api serve` and autostart with a bad config,
`api restart` refusing a bad config before it stops anything, and autostart waiting on a daemon
that is slow to answer (never a second daemon, never started by `api status`)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_run.rpc.autostart import lock_holder
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


BAD_STALL = TEST_CONFIG.replace("stall_seconds = 60.0", "stall_seconds = -1")


def test_api_restart_with_an_invalid_config_keeps_the_running_daemon_and_names_the_field(
    daemon: DaemonProcess, home: Home
) -> None:
    home.config_path.write_text(BAD_STALL)
    result = cli(home, "api", "restart")
    assert result.returncode == 1, result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "ConfigInvalid" and error["field"] == "supervisor.stall_seconds"
    assert error["message"].startswith("api restart refused: "), error
    assert f"the running daemon (pid {daemon.proc.pid}) keeps serving" in error["message"]
    assert "then run `agent-run api restart` again" in error["message"]
    assert "api stop" not in error["message"]
    assert daemon.proc.poll() is None and not home.stopped_path.exists()
    status = cli_json(home, "api", "status")
    assert status["pid"] == daemon.proc.pid
    assert status["config_refused"]["field"] == "supervisor.stall_seconds"
    text = cli(home, "--format", "text", "api", "restart")
    assert text.returncode == 1
    assert "error: ConfigInvalid [supervisor.stall_seconds]: api restart refused" in text.stderr
    home.config_path.write_text(TEST_CONFIG)
    restarted = cli_json(home, "api", "restart")
    assert restarted["stopped"]["pid"] == daemon.proc.pid and restarted["pid"] != daemon.proc.pid
    assert daemon.proc.wait(timeout=30) == 0
    cli(home, "api", "stop")


def test_a_restart_whose_new_daemon_fails_says_so_in_the_restarts_words(
    daemon: DaemonProcess, home: Home, tmp_path: Path
) -> None:
    # The new daemon (this CLI's child) dies at start; the running one was started before.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nif 'serve' in sys.argv:\n    sys.exit('boom: this daemon cannot start')\n"
    )
    failed = cli(home, "api", "restart", env={"PYTHONPATH": str(tmp_path)})
    assert failed.returncode == 1, failed.stdout + failed.stderr
    message = json.loads(failed.stdout)["error"]["message"]
    assert message.startswith(
        f"api restart stopped the daemon (pid {daemon.proc.pid}) but could not start a new one"
    ), message
    assert (
        "boom: this daemon cannot start" in message and "until `agent-run api restart`" in message
    )
    status = cli_json(home, "api", "status")["error"]
    assert status["message"].startswith("daemon stopped by `agent-run api restart` at "), status
    assert "which could not start a new one" in status["message"]
    assert "api stop" not in status["message"]
    restarted = cli_json(home, "api", "restart")
    assert restarted["stopped"] is None and "no daemon was running" in restarted["message"]
    assert cli_json(home, "api", "status")["pid"] == restarted["pid"]
    cli(home, "api", "stop")


def test_api_status_without_a_daemon_says_so_and_starts_none(home: Home) -> None:
    result = cli(home, "api", "status")
    assert result.returncode == 1, result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "DaemonUnavailable", error
    assert error["message"].startswith(f"no daemon answers at {home.socket_path}"), error
    assert "started one" not in result.stderr
    assert lock_holder(home) is None and not home.socket_path.exists()


# Every `api serve` started with this on its PYTHONPATH stops itself (SIGSTOP) at its first
# line: a daemon slow to become ready, for as long as the test keeps it stopped.
SELF_STOPPING = (
    "import os, signal, sys\nif 'serve' in sys.argv:\n    os.kill(os.getpid(), signal.SIGSTOP)\n"
)
OLD_AUTOSTART_BOUND = 20.0  # what the CLI waited before: a loaded machine's daemon took 15-46 s


def _serve_processes(home: Home) -> dict[int, str]:
    """pid -> process state (R, S, T...) of every `api serve` of this home, zombies left out."""
    from agent_run.system.processes import current

    found = {}
    for pid, args in current().command_lines():
        if str(home.root) in args and "serve" in args:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in ("Z", "X"):
                found[pid] = state
    return found


def test_two_clis_wait_for_a_daemon_slow_to_answer_and_end_with_one_daemon(
    home: Home, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(SELF_STOPPING)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("AGENT_RUN_HOME", None)
    argv = [sys.executable, "-m", "agent_run", "--home", str(home.root), "agents"]
    began = time.monotonic()
    clis = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        # Both CLIs found no daemon; each started one, which stopped itself before taking the
        # home's lock. Held stopped past the old bound, while the CLIs keep waiting.
        wait_for(
            lambda: (
                len(_serve_processes(home)) == 2 and set(_serve_processes(home).values()) == {"T"}
            ),
            timeout=60,
            what="the two autostarted daemons to be stopped",
        )
        wait_for(
            lambda: (
                time.monotonic() - began > OLD_AUTOSTART_BOUND + 5
                or any(c.poll() is not None for c in clis)
            ),
            timeout=120,
            what="the old autostart bound to pass",
        )
        assert [c.poll() for c in clis] == [None, None], [c.communicate() for c in clis]
        for pid in _serve_processes(home):
            os.kill(pid, signal.SIGCONT)
        outputs = [c.communicate(timeout=180) for c in clis]
        for c, (out, err) in zip(clis, outputs, strict=True):
            assert c.returncode == 0, out + err
            assert json.loads(out)["total"] == 0
            assert "waiting for the daemon (pid" in err and "it is alive" in err, err
        # One daemon serves: the other found the lock held, exited, and its CLI used the winner.
        serving = wait_for(
            lambda: len(_serve_processes(home)) == 1 and _serve_processes(home),
            what="the losing daemon to exit",
        )
        assert list(serving) == [int(lock_holder(home) or 0)]
        assert cli_json(home, "api", "status")["pid"] in serving
    finally:
        for pid in _serve_processes(home):
            os.kill(pid, signal.SIGKILL)
        for c in clis:
            c.kill()
            c.wait()
