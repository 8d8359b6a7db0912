"""`agent-run web` as a real child process for tests, and an HTTP client signed in to it."""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx2

from agent_run.system.home import Home
from tests.harness import wait_for

URL_LINE = re.compile(r"agent-run web: (http://127\.0\.0\.1:(\d+)/\?token=(\S+))")


class WebProcess:
    """`agent-run web --port N` (0: any free port) as a child; autostart off unless asked for,
    so it never leaves a daemon of its own behind by accident."""

    def __init__(
        self,
        home: Home,
        port: int = 0,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        autostart: bool = False,
    ) -> None:
        self.home = home
        self.port = port
        self.autostart = autostart
        self.args, self.extra_env = args, env or {}
        self.proc: Any = None  # a Popen, or a tests.zygote_client.Forked (the same methods)
        self.url = self.token = ""
        self._log: Path | None = None  # a forked one's stdout and stderr
        self._lines: list[str] = []  # a Popen's, read off its pipe

    def start(self) -> "WebProcess":
        env = {k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"}
        env.pop("AGENT_RUN_NO_AUTOSTART", None)
        if not self.autostart:
            env["AGENT_RUN_NO_AUTOSTART"] = "1"
        env.update(self.extra_env)
        from tests.zygote_client import forkable, spawn

        if forkable(self.extra_env):
            # Forked from the test zygote, which has the web stack imported (as DaemonProcess).
            self._log = self.home.root / f"web-test-{id(self)}.out"
            argv = ["--home", str(self.home.root), "web", "--port", str(self.port), *self.args]
            self.proc = spawn(argv, env, self._log)
        else:
            self._popen(env)
        match = wait_for(self._url, timeout=30, what="agent-run web to print its URL")
        self.url, port, self.token = match.group(1), match.group(2), match.group(3)
        self.port = int(port)
        return self

    @property
    def output(self) -> list[str]:
        """What it printed so far (stdout and stderr), a line each."""
        if self._log is None:
            return list(self._lines)
        try:
            return self._log.read_text(errors="replace").splitlines(keepends=True)
        except FileNotFoundError:
            return []

    def _popen(self, env: dict[str, str]) -> None:
        """A fresh interpreter (`tests.zygote_client.forkable`)."""
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent_run",
                "--home",
                str(self.home.root),
                "web",
                "--port",
                str(self.port),
                *self.args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert isinstance(self.proc, subprocess.Popen) and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)

    def _url(self) -> Any:
        assert self.proc is not None
        for line in list(self.output):
            match = URL_LINE.search(line)
            if match:
                return match
        if self.proc.poll() is not None:
            raise AssertionError(
                f"agent-run web exited {self.proc.returncode}: {''.join(self.output)}"
            )
        return None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return self.base

    def client(self, signed_in: bool = True, **kwargs: Any) -> httpx2.Client:
        client = httpx2.Client(base_url=self.base, timeout=60, **kwargs)
        if signed_in:
            response = client.get(f"/?token={self.token}")
            assert response.status_code == 303, response.text
            assert client.cookies.get(self.cookie) == self.token
        return client

    @property
    def cookie(self) -> str:
        return f"agent_run_web_{self.port}"

    def csrf(self, client: httpx2.Client) -> str:
        page = client.get("/agents/new").text
        return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()
