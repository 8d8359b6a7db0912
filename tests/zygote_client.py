"""Daemons forked from one pre-imported zygote (tests/support/zygote.py), behind a Popen-like handle."""

import atexit
import json
import locale
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent
ARGV_PAD = "-" * 200


class Zygote:
    """The fork server of this test process, started on first use, with its children's exits."""

    _lock = threading.Lock()
    _instance: "Zygote | None" = None

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            # The padding is room in every daemon's command line (they are forks of this
            # process) for a supervisor's: the daemon forks its own zygote only where it fits.
            [sys.executable, "-m", "tests.support.zygote", "--pad", ARGV_PAD],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(os.environ),
        )
        self.changed = threading.Condition()
        self.spawned: list[tuple[int, int]] = []  # (pid, serial) in request order
        self.exits: dict[int, int] = {}  # serial -> Popen-style return code
        self.request_lock = threading.Lock()
        assert self.proc.stdout is not None
        ready = json.loads(self.proc.stdout.readline() or "null")
        assert ready and "ready" in ready, "the test zygote did not start"
        threading.Thread(target=self._read, daemon=True, name="zygote-reader").start()
        atexit.register(self.close)

    def close(self) -> None:
        """End of input ends the zygote (its daemons are their fixtures' to stop)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    @classmethod
    def get(cls) -> "Zygote":
        with cls._lock:
            if cls._instance is None or cls._instance.proc.poll() is not None:
                cls._instance = cls()
            return cls._instance

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self.changed:
                if "pid" in message:
                    self.spawned.append((message["pid"], message["serial"]))
                else:
                    self.exits[message["exited"]] = message["code"]
                self.changed.notify_all()

    def spawn(self, request: dict[str, Any]) -> "Forked":
        assert self.proc.stdin is not None
        with self.request_lock:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            with self.changed:
                self.changed.wait_for(lambda: self.spawned, timeout=60)
                pid, serial = self.spawned.pop(0)
                return Forked(self, pid, serial)

    def exit_code(self, serial: int, timeout: float | None) -> int | None:
        with self.changed:
            self.changed.wait_for(lambda: serial in self.exits, timeout=timeout)
            return self.exits.get(serial)


class Forked:
    """What the tests use of a Popen: pid, poll, wait, returncode, terminate, kill."""

    def __init__(self, zygote: Zygote, pid: int, serial: int) -> None:
        self.zygote, self.pid, self.serial = zygote, pid, serial
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.serial, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        started = time.monotonic()
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.serial, timeout=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"daemon {self.pid}", time.monotonic() - started)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def forkable(overrides: dict[str, str] | None) -> bool:
    """Whether a child with these environment overrides may be forked from the zygote: a
    PYTHON* variable is read at interpreter start (sys.path, sitecustomize, entry points), which
    a fork never sees, so such a child must be a fresh interpreter."""
    return not any(name.startswith("PYTHON") for name in overrides or {})


def spawn(
    argv: list[str], env: dict[str, Any], log: Path, nofile_soft: int | None = None
) -> Forked:
    """A daemon: its own session, stdout and stderr appended to `log`."""
    request = {"argv": argv, "env": env, "log": str(log), "nofile_soft": nofile_soft}
    return Zygote.get().spawn(request)


def run_cli(
    argv: list[str], env: dict[str, str], input: str | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python -m agent_run ARGV` as `subprocess.run(capture_output=True, text=True)` would run
    it (in this working directory, killed at `timeout`), forked from the zygote."""
    import tempfile

    command = [sys.executable, "-m", "agent_run", *argv]
    with tempfile.TemporaryDirectory(prefix="arcli-") as folder:
        files = {name: Path(folder) / name for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(input or "", encoding=locale.getpreferredencoding(False))
        request = {name: str(path) for name, path in files.items()}
        request.update(argv=argv, env=env, cwd=os.getcwd(), cli=True)
        child = Zygote.get().spawn(request)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise subprocess.TimeoutExpired(command, timeout) from None
        out, err = (_text(files[name].read_bytes()) for name in ("stdout", "stderr"))
    return subprocess.CompletedProcess(command, code, out, err)


def _text(data: bytes) -> str:
    """Decoded as `text=True` does: the locale's encoding, universal newlines."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")
