"""`agent-run web --open` hands the signed-in URL to the user's browser ($BROWSER, as Python's
webbrowser reads it), here a small script that records what it was called with."""

import stat
import sys

from tests.harness import wait_for
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
