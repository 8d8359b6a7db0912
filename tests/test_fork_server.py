"""The supervisors' fork server: a forked supervisor is indistinguishable from a spawned one, and
a dead, hung or stale zygote only ever costs a plain spawn."""

import os
import re
import signal
import sys
import threading
from pathlib import Path

import pytest

from agent_run.services.reconcile import supervised_executions
from agent_run.system.home import Home
from agent_run.system.processes import current as current_processes
from tests.harness import DaemonProcess, db_rows, engine_row, make_home, remove_home, wait_for

# One worker runs these one after another: one of them touches the installed package (the
# zygote goes stale for every daemon), which would send the others' spawns down the fallback.
pytestmark = pytest.mark.xdist_group("fork_server_package")

LONG_TASK = "steps: 2000\nstep_seconds: 0.05"
ZYGOTE_SOURCE = Path(__file__).parent.parent / "src/agent_run/supervisor/zygote.py"


def zygote_pid(home: Home) -> int | None:
    """The live fork server of this home, by its command line."""
    for pid, args in current_processes().command_lines():
        if "agent_run.supervisor.zygote" in args and str(home.root) in args:
            if _stat(pid) is not None and _stat(pid)[0] not in ("Z", "X"):
                return pid
    return None


def zygote_ready(home: Home) -> int | None:
    """The zygote's pid once it has said it is ready (its log), else None."""
    pid = zygote_pid(home)
    log = home.logs_dir / "zygote.log"
    if pid is None or not log.exists():
        return None
    return pid if f"zygote ready: pid {pid}\n" in log.read_text() else None


def warm_zygote(daemon: DaemonProcess, home: Home, workdir: Path) -> int:
    """The zygote starts with the daemon's first supervisor spawn: make one, return its pid."""
    agent = daemon.call("start", {"task": "answer: warm", "workdir": str(workdir)})
    assert (
        daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]["state"]
        == "succeeded"
    )
    return wait_for(lambda: zygote_ready(home), what="the zygote to be ready")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def running_supervisor(
    daemon: DaemonProcess, home: Home, task: str, workdir: Path, runtime: str = "demo"
) -> int:
    """Start an agent and return its supervisor's pid once its engine's output is being logged."""
    agent = daemon.call("start", {"task": task, "workdir": str(workdir), "runtime": runtime})
    row = engine_row(home, agent["id"])
    raw = home.execution_dir(agent["id"], row["id"]) / "runtime.jsonl"
    wait_for(lambda: raw.exists() and raw.stat().st_size > 0, what="the engine's first line")
    return int(row["supervisor_pid"])


def parent(pid: int) -> int:
    fields = _stat(pid)
    assert fields is not None, f"pid {pid} is gone"
    return int(fields[1])


def portrait(pid: int, home: Home) -> dict[str, object]:
    """What a supervisor looks like from outside, its per-run values (pids, paths) abstracted."""
    status = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        target = re.sub(r"\[\d+\]", "", target.replace(str(home.root), "HOME"))
        fds.append(re.sub(r"/agents/[^/]+/[^/]+/", "/agents/A/E/", target))
    args = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    return {
        "session leader": os.getsid(pid) == pid and os.getpgid(pid) == pid,
        "signals": {k: status[k].strip() for k in ("SigBlk", "SigIgn", "SigCgt")},
        "umask": status["Umask"].strip(),
        "cwd": os.readlink(f"/proc/{pid}/cwd"),
        "fds": sorted(fds),  # numbers differ: the ready pipe's is the spawner's choice
        "stdio": [Path(os.readlink(f"/proc/{pid}/fd/{fd}")).name[:5] for fd in (0, 1, 2)],
        "argv": [a.decode().replace(str(home.root), "HOME") for a in args[1:5]],
    }


def test_forked_supervisor_is_indistinguishable_from_a_spawned_one(daemon, home, workdir):
    warm_zygote(daemon, home, workdir)
    forked = running_supervisor(daemon, home, LONG_TASK, workdir)
    zygote = zygote_pid(home)
    assert parent(forked) == zygote, "forked by the zygote, once"
    plain_home = make_home()
    plain = DaemonProcess(plain_home, env={"AGENT_RUN_FORK_SERVER": "0"}).start()
    try:
        assert zygote_pid(plain_home) is None, "AGENT_RUN_FORK_SERVER=0 runs no zygote"
        spawned = running_supervisor(plain, plain_home, LONG_TASK, workdir)
        assert parent(spawned) == plain.proc.pid  # spawned the plain way
        assert portrait(forked, home) == portrait(spawned, plain_home)
    finally:
        plain.stop()
        remove_home(plain_home)
    # Nothing the daemon or the zygote holds is open in it (beyond what both see by path).
    theirs = {
        os.readlink(f"/proc/{owner}/fd/{fd}")
        for owner in (daemon.proc.pid, zygote)
        for fd in os.listdir(f"/proc/{owner}/fd")
    }
    mine = {os.readlink(f"/proc/{forked}/fd/{fd}") for fd in os.listdir(f"/proc/{forked}/fd")}
    # The database is open in each by path; anonymous inodes (an epoll) all read alike.
    shared = {t for t in mine & theirs if not t.startswith((str(home.db_path), "anon_inode:"))}
    assert shared <= {"/dev/null"}, f"descriptors leaked into the supervisor: {shared}"
    ident = db_rows(home, "SELECT * FROM executions WHERE supervisor_pid = ?", (forked,))[0]
    assert ident["id"] in supervised_executions(), "reconciliation finds it by its command line"
    assert ident["supervisor_start_ticks"] == int(_stat(forked)[19])
    assert ident["boot_id"] == current_processes().boot_id()


def fds_of(pid: int) -> dict[int, str]:
    return {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}


def test_a_fresh_daemon_runs_no_zygote_until_its_first_spawn_which_is_a_plain_one(home, workdir):
    """A daemon whose command line has no room for a supervisor's (a user's `agent-run api
    serve`) cannot fork its zygote: booting starts none (a web UI or a status call never pays its
    imports); the first start does, and is spawned the plain way itself (at once: the agent must
    not wait on the zygote's imports, nor die with it); once the zygote is ready, the next is
    forked."""
    daemon = DaemonProcess(home, fresh=True).start()
    try:
        assert daemon.call("ping")["pid"] == daemon.proc.pid
        assert zygote_pid(home) is None and not (home.logs_dir / "zygote.log").exists()
        first = running_supervisor(daemon, home, LONG_TASK, workdir)
        assert parent(first) == daemon.proc.pid, "spawned the plain way"
        zygote = wait_for(lambda: zygote_ready(home), what="the zygote the first spawn started")
        assert "--forked" not in Path(f"/proc/{zygote}/cmdline").read_text()
        forked = running_supervisor(daemon, home, LONG_TASK, workdir)
        assert parent(forked) == zygote_pid(home), "forked"
    finally:
        daemon.stop()


def test_a_daemon_with_room_forks_its_zygote_at_boot_holding_nothing_of_the_daemon(
    daemon, home, workdir
):
    """The tests' daemons are forks of a padded process: each forks its zygote from itself
    before its event loop, so even its first agent is forked. The zygote keeps only its control
    socket and its log open (not the daemon's lock, database or logs) and shows the plain
    zygote's command line, with `--forked`."""
    zygote = wait_for(lambda: zygote_ready(home), what="the zygote forked at boot")
    assert parent(zygote) == daemon.proc.pid
    args = Path(f"/proc/{zygote}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    assert args[1:5] == [b"-m", b"agent_run.supervisor.zygote", b"--home", str(home.root).encode()]
    assert b"--forked" in args
    fds = fds_of(zygote)
    assert sorted(fds) == [0, 1, 2], fds
    assert fds[0].startswith("socket:") and fds[1] == fds[2] == str(home.logs_dir / "zygote.log")
    assert os.getsid(zygote) == zygote, "its own session, as the plain zygote's"
    first = running_supervisor(daemon, home, LONG_TASK, workdir)
    assert parent(first) == zygote, "the first agent is forked"
    row = db_rows(home, "SELECT id FROM executions WHERE supervisor_pid = ?", (first,))[0]
    assert row["id"] in supervised_executions(), "reconciliation finds it by its command line"


def test_a_forked_zygote_and_its_supervisors_show_no_secret_of_the_daemons_environment(
    home, workdir
):
    """A fresh daemon with room in its command line forks its zygote: /proc/PID/environ of the
    zygote and of each supervisor would show the daemon's exec-time environment, so the zygote
    writes its allowlist over it."""
    secret = "daemon-env-secret-9f3b2c"
    serve = (
        "import runpy, sys; sys.argv = ['agent-run', '--home', sys.argv[1], 'api', 'serve']; "
        "runpy.run_module('agent_run', run_name='__main__')"
    )
    # `agent-run api serve` with room in its command line for a supervisor's
    argv = [sys.executable, "-c", serve, str(home.root), "-" * 200]
    daemon = DaemonProcess(home, env={"LEAKY_SECRET": secret}, command=argv).start()
    proc = daemon.proc
    try:
        assert secret.encode() in Path(f"/proc/{proc.pid}/environ").read_bytes()
        zygote = wait_for(lambda: zygote_ready(home), what="the zygote forked at boot")
        assert parent(zygote) == proc.pid, "forked from the daemon"
        supervisor = running_supervisor(daemon, home, LONG_TASK, workdir)
        assert parent(supervisor) != proc.pid, "forked"
        for pid in (zygote, supervisor):
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert secret.encode() not in environ
            assert b"LEAKY_SECRET" not in environ
            assert b"PATH=" in environ, "it shows the allowlist instead"
    finally:
        daemon.stop()


def test_daemon_secret_never_reaches_a_forked_supervisor_or_its_engine(home, workdir):
    daemon = DaemonProcess(home, env={"FORK_TEST_SECRET": "s3cret-value"}).start()
    try:
        warm_zygote(daemon, home, workdir)
        zygote = zygote_pid(home)
        assert b"s3cret-value" not in Path(f"/proc/{zygote}/environ").read_bytes()
        agent = daemon.call(
            "start", {"task": "echo_env: FORK_TEST_SECRET", "workdir": str(workdir)}
        )
        result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
        assert result["agent"]["state"] == "succeeded"
        assert "s3cret-value" not in daemon.call("answer", {"agent_id": agent["id"]})["text"]
    finally:
        daemon.stop()


def test_forked_supervisor_gets_its_credential_over_the_pipe_not_through_the_zygote(home, workdir):
    token = "fork-token-5d1e8a7c2b"
    config = (home.root / "config.toml").read_text()
    config += '\n[runtimes.keyed]\nengine = "demo"\nmodels = ["demo-1"]\nauth = { env = "K" }\n'
    (home.root / "config.toml").write_text(config)
    daemon = DaemonProcess(home, env={"K": token}).start()
    try:
        warm_zygote(daemon, home, workdir)
        supervisor = running_supervisor(daemon, home, LONG_TASK, workdir, "keyed")
        assert parent(supervisor) != daemon.proc.pid, "forked"
        engine = db_rows(
            home, "SELECT engine_pid FROM executions WHERE supervisor_pid = ?", (supervisor,)
        )[0]["engine_pid"]
        assert f"K={token}".encode() in Path(f"/proc/{engine}/environ").read_bytes()
        zygote = zygote_pid(home)
        assert token.encode() not in Path(f"/proc/{zygote}/environ").read_bytes()
        assert token.encode() not in Path(f"/proc/{supervisor}/environ").read_bytes()
    finally:
        daemon.stop()


RUNNING_ENGINES = "SELECT * FROM executions WHERE engine_pid IS NOT NULL"


def test_forked_supervisors_survive_kill9_of_daemon_and_zygote(daemon, home, workdir):
    warm_zygote(daemon, home, workdir)
    warm = {r["id"] for r in db_rows(home, "SELECT id FROM executions")}
    ids = []
    for n in range(3):
        agent = daemon.call(
            "start",
            {"task": f"steps: 40\nstep_seconds: 0.1\nanswer: a{n}", "workdir": str(workdir)},
        )
        ids.append(agent["id"])

    def three_engines() -> list | None:
        rows = [r for r in db_rows(home, RUNNING_ENGINES) if r["id"] not in warm]
        return rows if len(rows) == 3 else None

    rows = wait_for(three_engines, what="three engines running")
    zygote = zygote_pid(home)
    assert all(parent(r["supervisor_pid"]) == zygote for r in rows), "forked ones"
    os.kill(zygote, signal.SIGKILL)
    # Orphans now, adopted by init (or the nearest subreaper), running on.
    wait_for(
        lambda: all(parent(r["supervisor_pid"]) != zygote for r in rows),
        what="the zygote's supervisors reparented",
    )
    daemon.kill9()
    # Any zygote the daemon had restarted reads end of input and goes; its supervisors stay.
    wait_for(lambda: zygote_pid(home) is None, what="no zygote left without its daemon")
    rows = [r for r in db_rows(home, "SELECT * FROM executions") if r["id"] not in warm]
    assert all(r["state"] != "succeeded" for r in rows)
    daemon.start()
    for n, agent_id in enumerate(ids):
        result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
        assert result["agent"]["state"] == "succeeded", result
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == f"a{n}"


def test_zygote_killed_mid_burst_every_agent_succeeds_and_it_restarts(daemon, home, workdir):
    first = warm_zygote(daemon, home, workdir)
    started: list[tuple[str, str]] = []  # (agent id, its answer)
    killed = threading.Event()

    def burst(tag: str, count: int) -> None:
        for n in range(count):
            answer = f"burst {tag}{n}"
            agent = daemon.call("start", {"task": f"answer: {answer}", "workdir": str(workdir)})
            started.append((agent["id"], answer))
            if len(started) >= 5 and not killed.is_set():
                killed.set()
                os.kill(first, signal.SIGKILL)

    threads = [threading.Thread(target=burst, args=(tag, 10)) for tag in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert killed.is_set() and len(started) == 20
    for agent_id, answer in started:
        result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 90})
        assert result["agent"]["state"] == "succeeded", result
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == answer
    second = wait_for(
        lambda: pid if (pid := zygote_ready(home)) not in (None, first) else None,
        what="a new zygote",
    )
    assert '"fork_server.lost"' in (home.logs_dir / "daemon.log").read_text()
    supervisor = running_supervisor(daemon, home, LONG_TASK, workdir)
    assert parent(supervisor) == second, "the new zygote forks again"
    assert zygote_pid(home) == second


def test_the_kernel_reaps_each_forked_supervisor_as_it_ends(daemon, home, workdir):
    """The zygote ignores SIGCHLD, so a supervisor it forked leaves no zombie behind it (the
    zygote never waits for one); the supervisor itself, and so its engine, has the default
    disposition back (a spawned supervisor's signal masks: the indistinguishable test)."""
    zygote = warm_zygote(daemon, home, workdir)
    ids = [
        daemon.call("start", {"task": f"answer: z{n}", "workdir": str(workdir)})["id"]
        for n in range(5)
    ]
    for n, agent_id in enumerate(ids):
        result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
        assert result["agent"]["state"] == "succeeded", result
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == f"z{n}"
    pids = [r["supervisor_pid"] for r in db_rows(home, "SELECT supervisor_pid FROM executions")]
    assert len(pids) == 6 and all(pids)
    children = Path(f"/proc/{zygote}/task/{zygote}/children")  # a zombie is listed until reaped
    # An ended supervisor's quick exit follows its terminal row by a moment: wait for it.
    wait_for(lambda: children.read_text().split() == [], what="the zygote left with no child")
    assert zygote_pid(home) == zygote


@pytest.fixture
def restore_zygote_mtime():
    st = ZYGOTE_SOURCE.stat()
    yield
    os.utime(ZYGOTE_SOURCE, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_zygote_is_replaced_when_the_package_changes(daemon, home, workdir, restore_zygote_mtime):
    old = warm_zygote(daemon, home, workdir)
    st = ZYGOTE_SOURCE.stat()
    os.utime(ZYGOTE_SOURCE, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # "upgraded"
    supervisor = running_supervisor(daemon, home, LONG_TASK, workdir)
    assert parent(supervisor) == daemon.proc.pid, "the stale zygote must not fork it"
    assert '"fork_server.stale"' in (home.logs_dir / "daemon.log").read_text()
    wait_for(lambda: _stat(old) is None or _stat(old)[0] in ("Z", "X"), what="the old zygote")
    new = wait_for(
        lambda: pid if (pid := zygote_ready(home)) not in (None, old) else None,
        what="a zygote of the new code",
    )
    supervisor = running_supervisor(daemon, home, LONG_TASK, workdir)
    assert parent(supervisor) != daemon.proc.pid
    assert zygote_pid(home) == new


def test_a_forked_supervisor_runs_with_the_requested_environment_not_the_zygotes(
    home, workdir, monkeypatch
):
    """The zygote keeps its own environment when a request's is the same (nothing rewritten);
    when it differs the supervisor takes the request's whole: a variable only the request has
    reaches the engine, one only the zygote had does not (both are passed through to engines)."""
    from agent_run.supervisor.forkserver import ForkServer
    from agent_run.supervisor.launch import start_supervisor, supervisor_environment
    from tests.test_admission import admit_without_spawning

    monkeypatch.setenv("TZ", "request-only")
    monkeypatch.delenv("LC_CTYPE", raising=False)
    requested = supervisor_environment()
    zygote_env = {k: v for k, v in requested.items() if k != "TZ"} | {"LC_CTYPE": "zygote-only"}
    server = ForkServer(home, zygote_env, home.logs_dir / "zygote.log")
    server.start()
    started = None
    try:
        wait_for(lambda: zygote_ready(home), what="the zygote to be ready")
        agent_id, execution_id = admit_without_spawning(home, LONG_TASK, workdir)
        log = home.logs_dir / "supervisor-env-test.log"
        started = start_supervisor(home, execution_id, log, fork_server=server)
        assert server.forks == 1 and started.pid is None, "it was spawned, not forked"
        row = wait_for(
            lambda: next(
                iter(
                    db_rows(
                        home,
                        "SELECT * FROM executions WHERE id = ? AND engine_pid IS NOT NULL",
                        (execution_id,),
                    )
                ),
                None,
            ),
            what="the engine to run",
        )
        engine_env = Path(f"/proc/{row['engine_pid']}/environ").read_bytes().split(b"\0")
        assert b"TZ=request-only" in engine_env
        assert b"LC_CTYPE=zygote-only" not in engine_env
        os.killpg(row["supervisor_pid"], signal.SIGKILL)
        os.killpg(row["engine_pid"], signal.SIGKILL)
    finally:
        if started is not None:
            os.close(started.ready_fd)
        server.close()
