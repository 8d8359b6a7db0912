"""The daemon's logs stay bounded while it runs (a small `[daemon] log_max_bytes` here):
daemon.log is rotated by its writer (daemon.log.1 ... .log_keep), and daemon.out (the
autostarted daemon's own stdout and stderr) and zygote.log (the fork server's) are copied aside
and cut, their writers carrying on at the new end."""

import json
import os
import signal
from pathlib import Path

from agent_run.supervisor.forkserver import RESTART_SECONDS
from agent_run.system.home import Home
from tests.harness import TEST_CONFIG, DaemonProcess, cli, cli_json, wait_for
from tests.test_fork_server import zygote_pid, zygote_ready

MAX = 4096
SMALL_LOGS = TEST_CONFIG.replace(
    "[daemon]\n",
    f"[daemon]\nlog_max_bytes = {MAX}\nlog_keep = 2\nlog_check_seconds = 0.2\n",
)


def _age(pid: int) -> float:
    """Seconds since process `pid` started (Linux /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    started = int(stat[stat.rindex(")") + 2 :].split()[19]) / os.sysconf("SC_CLK_TCK")
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def log_lines(home: Home) -> list[str]:
    return (home.logs_dir / "daemon.log").read_text().splitlines()


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_daemon_log_is_rotated_while_the_daemon_runs(home: Home) -> None:
    home.config_path.write_text(SMALL_LOGS)
    daemon = DaemonProcess(home).start()
    log = home.logs_dir / "daemon.log"
    try:
        revisions = []
        for i in range(60):  # each edit, read on `status`, logs a `config.reloaded` line
            home.config_path.write_text(SMALL_LOGS + f"# edit {'x' * i}\n")
            revisions.append(daemon.call("status")["config_revision"])
        assert daemon.call("ping")["pid"] == daemon.proc.pid  # one daemon all along
    finally:
        daemon.stop()
    rotated = [log.with_name(f"daemon.log.{n}") for n in (1, 2)]
    assert all(path.exists() for path in rotated), sorted(os.listdir(home.logs_dir))
    assert not log.with_name("daemon.log.3").exists()  # log_keep = 2
    for path in (log, *rotated):
        lines = path.read_text().splitlines()
        assert path.stat().st_size <= MAX + max(len(line) + 1 for line in lines), path
        assert path.stat().st_mode & 0o777 == 0o600
    kept = _lines(rotated[1]) + _lines(rotated[0]) + _lines(log)  # oldest first, none torn
    reloads = [line["revision"] for line in kept if line["event"] == "config.reloaded"]
    assert reloads == revisions[-len(reloads) :] and len(reloads) > 10


def test_daemon_out_and_zygote_log_are_cut_while_the_daemon_runs(home: Home, workdir) -> None:
    home.config_path.write_text(SMALL_LOGS)
    cli_json(home, "agents")  # autostarted: its stdout and stderr are logs/daemon.out
    try:
        warm = cli_json(home, "start", "--task", "answer: warm", "--workdir", str(workdir))
        assert cli_json(home, "wait", warm["id"])["agent"]["state"] == "succeeded"  # a zygote
        old_zygote = wait_for(lambda: zygote_ready(home), what="the fork server")
        out, zygote = home.logs_dir / "daemon.out", home.logs_dir / "zygote.log"
        filler = "".join(f"line {n} of what piled up\n" for n in range(400)).encode()
        for path in (out, zygote):  # appended as their writers do (O_APPEND)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.write(fd, filler)
            os.close(fd)
        for path in (out, zygote):
            kept = path.with_name(f"{path.name}.1")
            wait_for(
                lambda p=path, k=kept: k.exists() and p.stat().st_size < MAX,
                what=f"{path.name} to be cut",
            )
            assert filler in kept.read_bytes() and kept.stat().st_mode & 0o777 == 0o600

        def truncations() -> int:
            # Logged just after the cut (so maybe not yet), and daemon.log is cut at MAX too.
            logs = [home.logs_dir / n for n in ("daemon.log", "daemon.log.1", "daemon.log.2")]
            text = "".join(p.read_text() for p in logs if p.exists())
            return text.count('"event": "log.truncated"') >= 2

        wait_for(truncations, what="both cuts logged")
        # The fork server's next one writes at the new end of the cut file (no hole of NULs):
        # the next spawn finds the killed one lost and starts another (at most one a second).
        wait_for(lambda: _age(old_zygote) >= RESTART_SECONDS, what="the fork server to be 1 s old")
        os.kill(old_zygote, signal.SIGKILL)
        agent = cli_json(home, "start", "--task", "answer: hi", "--workdir", str(workdir))
        try:
            new_zygote = wait_for(
                lambda: (pid := zygote_ready(home)) not in (None, old_zygote) and pid,
                timeout=90,
                what="a new fork server",
            )
        except AssertionError:
            events = [line for line in log_lines(home) if "fork_server" in line]
            raise AssertionError(f"no new fork server: {events}; {zygote.read_text()!r}") from None
        text = zygote.read_bytes()
        assert b"\0" not in text and f"zygote ready: pid {new_zygote}\n".encode() in text
        assert zygote_pid(home) == new_zygote
        assert cli_json(home, "wait", agent["id"])["agent"]["state"] == "succeeded"
    finally:
        cli(home, "api", "stop")
