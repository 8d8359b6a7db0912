"""`agent-run api stop` stays stopped, as `systemctl stop` does: the web UI and MCP sessions,
which retry on their own, do not start the daemon again (a "stopped" mark in the home, written
before the SIGTERM); `api status` and `doctor` say it is stopped; `api serve` (what a service
manager runs), `api restart` or any other CLI verb start it again. And `api stop` of a daemon
that holds the lock but does not answer says so, with the command that ends it."""

import asyncio
import json
import os
import subprocess
import sys

import pytest

from agent_run.cli.service_files import systemd_unit
from agent_run.rpc.autostart import lock_holder as daemon_lock_holder
from agent_run.system.home import Home
from tests.harness import DaemonProcess, cli, cli_json, wait_for
from tests.mcp_harness import mcp_session
from tests.web_harness import WebProcess

STOPPED = "daemon stopped by `agent-run api stop`"
RESTART = "run `agent-run api restart`"
AUTOSTART_ON = {"AGENT_RUN_NO_AUTOSTART": "0"}


class WebApi:
    """The web UI's JSON API, signed in (its CSRF token read once, from a page)."""

    def __init__(self, web: WebProcess) -> None:
        self.client = web.client()
        self.csrf = web.csrf(self.client)
        self.origin = web.origin

    def status(self) -> tuple[int, dict]:
        answer = self.client.post(
            "/api/tools/status", json={}, headers={"x-csrf-token": self.csrf, "origin": self.origin}
        )
        return answer.status_code, answer.json()


async def _mcp_status(session) -> tuple[bool, str]:
    result = await session.call_tool("status", {})
    return bool(result.is_error), " ".join(block.text for block in result.content)


def test_api_stop_stays_stopped_while_the_web_ui_and_an_mcp_session_run(
    daemon: DaemonProcess, home: Home
) -> None:
    web = WebProcess(home, env=AUTOSTART_ON).start()
    try:
        api = WebApi(web)
        assert api.status()[0] == 200
        asyncio.run(_stopped_for_mcp_and_web(home, api, daemon.proc.pid))
    finally:
        web.stop()
        cli(home, "api", "stop")


async def _stopped_for_mcp_and_web(home: Home, api: WebApi, old_pid: int) -> None:
    env = {**os.environ, **AUTOSTART_ON}
    async with mcp_session(home, env=env) as session:
        assert (await _mcp_status(session))[0] is False
        stopped = await asyncio.to_thread(cli_json, home, "api", "stop")
        assert stopped["stopped"] is True and stopped["pid"] == old_pid
        assert "stays stopped" in stopped["message"]
        assert home.stopped_path.exists()
        # Each front-end tries the daemon again (and, without the mark, would autostart one).
        code, answer = await asyncio.to_thread(api.status)
        assert code == 503 and STOPPED in answer["error"]["message"], answer
        assert RESTART in answer["error"]["message"]
        failed, text = await _mcp_status(session)
        assert failed and STOPPED in text and RESTART in text, text
        assert not home.socket_path.exists() and daemon_lock_holder(home) is None
        # Questions about the daemon say it is stopped; they do not start it.
        status = await asyncio.to_thread(cli, home, "api", "status")
        assert status.returncode == 1
        assert STOPPED in json.loads(status.stdout)["error"]["message"]
        doctor = await asyncio.to_thread(cli_json, home, "doctor")
        daemon_check = next(c for c in doctor["checks"] if c["check"] == "daemon")
        assert daemon_check["level"] == "bad" and STOPPED in daemon_check["detail"]
        assert daemon_check["fix"] == "agent-run api restart"
        assert not home.socket_path.exists() and daemon_lock_holder(home) is None
        # `api restart` starts one, and both front-ends find it.
        restarted = await asyncio.to_thread(cli_json, home, "api", "restart")
        assert restarted["pid"] != old_pid and not home.stopped_path.exists()
        assert (await asyncio.to_thread(api.status))[0] == 200
        assert (await _mcp_status(session))[0] is False


def test_the_service_recipe_api_stop_then_the_units_api_serve_works_with_a_web_ui_open(
    home: Home,
) -> None:
    """README: stop the autostarted daemon, then `systemctl --user enable --now` the unit. No
    systemd runs here: the unit's own ExecStart line is run, as systemd would run it."""
    cli_json(home, "agents")  # autostarts the daemon, as a first CLI call does
    first = cli_json(home, "api", "status")
    web = WebProcess(home, env=AUTOSTART_ON).start()
    unit = None
    try:
        api = WebApi(web)
        assert cli_json(home, "api", "stop")["pid"] == first["pid"]
        assert api.status()[0] == 503  # the page's retry did not restart it
        exec_start = next(
            line.removeprefix("ExecStart=")
            for line in systemd_unit(home).splitlines()
            if line.startswith("ExecStart=")
        )
        argv = exec_start.split()
        assert argv[0] == sys.executable and argv[-2:] == ["api", "serve"]
        with open(home.root / "unit.out", "ab") as out:
            unit = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        wait_for(
            lambda: unit.poll() is not None or home.socket_path.exists(),
            what="the unit's daemon to serve",
        )
        assert unit.poll() is None, (home.root / "unit.out").read_text()
        assert not home.stopped_path.exists()  # the user's `api serve` cleared the mark
        code, answer = wait_for(
            lambda: (r := api.status())[0] == 200 and r, what="the web UI to see it"
        )
        assert answer["pid"] == unit.pid
    finally:
        web.stop()
        if unit is not None and unit.poll() is None:
            unit.terminate()
            unit.wait(timeout=30)
        cli(home, "api", "stop")


def test_an_autostarted_daemon_does_not_serve_a_home_marked_stopped(home: Home) -> None:
    assert cli_json(home, "api", "stop") == {
        "stopped": False,
        "message": "no daemon was running; it stays stopped (the web UI and MCP sessions do not "
        "start it) until `agent-run api restart`, `agent-run api serve` or another agent-run "
        "command",
    }
    # What a web UI's or MCP session's autostart spawns, had it lost the race with the stop.
    refused = cli(home, "api", "serve", "--autostarted", timeout=60)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith("error: DaemonUnavailable: ") and STOPPED in refused.stderr
    assert home.stopped_path.exists() and not home.socket_path.exists()
    # The user's own `api serve` (a service manager's ExecStart) serves and clears the mark.
    served = DaemonProcess(home).start()
    try:
        assert not home.stopped_path.exists()
        assert "daemon.stop_mark_cleared" in (home.logs_dir / "daemon.log").read_text()
    finally:
        served.stop()


def test_a_cli_verb_starts_a_stopped_daemon_again_and_says_why(home: Home) -> None:
    cli_json(home, "agents")  # starts one (`api status` would not)
    first = cli_json(home, "api", "status")
    cli_json(home, "api", "stop")
    listed = cli(home, "agents")
    try:
        assert listed.returncode == 0, listed.stderr
        assert (
            "the daemon was stopped by `agent-run api stop` for " in listed.stderr
            and "started one (pid" in listed.stderr
        ), listed.stderr
        assert not home.stopped_path.exists()
        assert cli_json(home, "api", "status")["pid"] != first["pid"]
    finally:
        cli(home, "api", "stop")


@pytest.fixture
def lock_holder(home: Home):
    """A process that holds the home's daemon lock (its pid written in it, as a daemon does)
    and never answers on the socket: a wedged daemon."""
    script = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.ftruncate(fd, 0); os.pwrite(fd, f'{os.getpid()}\\n'.encode(), 0)\n"
        "print('locked', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(home.lock_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    yield proc
    proc.kill()
    proc.wait()


def test_api_stop_of_a_daemon_that_holds_the_lock_but_does_not_answer_says_how_to_end_it(
    home: Home, lock_holder: subprocess.Popen
) -> None:
    result = cli(home, "api", "stop", timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert f"a daemon (pid {lock_holder.pid}) holds {home.lock_path} but does not answer" in message
    assert f"`kill {lock_holder.pid}`" in message and f"`kill -9 {lock_holder.pid}`" in message
    assert lock_holder.poll() is None  # told, not killed
    assert home.stopped_path.exists()  # once it is gone, nothing autostarts it behind the user
    text = cli(home, "--format", "text", "api", "stop", timeout=60)
    assert text.returncode == 1 and f"kill {lock_holder.pid}" in text.stderr
