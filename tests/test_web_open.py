"""`agent-run web --open` hands the signed-in URL to the user's browser ($BROWSER, as Python's
webbrowser reads it), here a small script that records what it was called with; and
`agent-run web` starts the daemon when none answers."""

import os
import re
import signal
import stat
import sys

from tests.harness import pgid_alive, wait_for
from tests.web_harness import WebProcess


def test_open_calls_the_browser_with_the_url_carrying_port_and_token(daemon, tmp_path):
    called = tmp_path / "called.txt"
    browser = tmp_path / "browser"
    browser.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"open({str(called)!r}, 'a').write(repr(sys.argv[1:]) + '\\n')\n"
    )
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    web = WebProcess(
        daemon.home,
        args=("--open",),
        env={"BROWSER": str(browser), "DISPLAY": "", "WAYLAND_DISPLAY": ""},
    ).start()
    try:
        line = wait_for(
            lambda: called.exists() and called.read_text(),
            timeout=30,
            what="the browser to be called",
        )
        assert line == repr([web.url]) + "\n"  # called once, with exactly the printed URL
        assert web.url == f"http://127.0.0.1:{web.port}/?token={web.token}" and web.port > 0
        assert web.token == (daemon.home.root / "web.token").read_text().strip()
        signed_in = web.client(signed_in=False).get(web.url)
        assert signed_in.status_code == 303 and signed_in.cookies.get(web.cookie) == web.token
    finally:
        web.stop()


def test_without_open_no_browser_is_called(daemon, tmp_path):
    called = tmp_path / "called.txt"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$@" >> {called}\n')
    browser.chmod(0o700)
    web = WebProcess(daemon.home, env={"BROWSER": str(browser)}).start()
    try:
        # webbrowser.open runs (and waits for) the browser before the server starts serving.
        assert web.client().get("/").status_code == 200
        assert not called.exists()
    finally:
        web.stop()


def _daemon_pid(home) -> int:
    return int((home.root / "daemon.lock").read_text().strip())


def test_web_autostarts_the_daemon_when_none_answers_and_again_after_it_dies(home, workdir):
    """No daemon: `agent-run web` starts one (detached, as the CLI does) before it prints its URL.
    The daemon killed later is started again by the next page (it starts one whenever none
    answers, one at a time), and no agent is harmed by either."""
    assert not home.socket_path.exists()
    web = WebProcess(home, autostart=True).start()
    pids = []
    try:
        started = re.search(
            r"no daemon was answering .*; started one \(pid (\d+)\)", "".join(web.output)
        )
        assert started, web.output
        pids.append(int(started.group(1)))
        assert _daemon_pid(home) == pids[0]
        client = web.client()
        started_agent = client.post(
            "/api/tools/start",
            json={"task": "steps: 20\nstep_seconds: 0.1\nanswer: kept", "workdir": str(workdir)},
            headers={"authorization": f"Bearer {web.token}"},
        )
        agent_id = started_agent.json()["id"]
        os.kill(pids[0], signal.SIGKILL)
        wait_for(lambda: not pgid_alive(pids[0]), timeout=30, what="the daemon to die")
        page = client.get(f"/agents/{agent_id}")  # no daemon answers: this call starts one
        assert page.status_code == 200, page.text
        pids.append(_daemon_pid(home))
        assert pids[1] != pids[0] and pgid_alive(pids[1])
        assert len(re.findall(r"started one", "".join(web.output))) == 2, web.output
        done = client.post(
            "/api/tools/wait",
            json={"agent_id": agent_id, "timeout_seconds": 60},
            headers={"authorization": f"Bearer {web.token}"},
        ).json()
        assert done["agent"]["state"] == "succeeded", done
    finally:
        web.stop()
        for pid in pids:
            if pgid_alive(pid):
                os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not any(pgid_alive(p) for p in pids), timeout=30, what="daemons gone")


def test_a_busy_port_is_refused_in_one_line_suggesting_port_0(daemon):
    """The default port is one per machine: a second home's web UI (or any program) may hold
    it. The refusal says how to get any free port."""
    import socket
    import subprocess

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agent_run", "--home", str(daemon.home.root), "web"]
            + ["--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"},
        )
    finally:
        holder.close()
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"agent-run web: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "`agent-run web --port 0` picks a free one"
    ], done.stderr
