"""A home of any length: every Unix socket agent-run binds or connects to (api.sock, wake.sock,
each agent's worker.sock, a host's) is addressed through its folder's descriptor
(`agent_run.system.unix_sockets`), so a home whose socket paths are longer than a socket address holds
(108 bytes) runs agents, batches, the web UI, `agent-run mcp` and host agents; where the system
cannot do that (no /proc/self/fd: forced here by a bubblewrap without /proc), `init`, `doctor`
and `api serve` say so, naming the path and its length, before any agent runs."""

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.engines.sandbox import (
    Bind,
    bwrap_argv,
    bwrap_path,
    ordered,
    python_binds,
    system_binds,
)
from agent_run.store import wake
from agent_run.system.home import Home
from tests.batch_harness import CANDIDATE, make_repo, runs_of, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, cli, remove_home, short_tmpdir, wait_for
from tests.mcp_harness import mcp_session
from tests.ssh_harness import REMOTE_CONFIG, RemoteHost, reachable, remote_host  # noqa: F401

SUN_PATH = 108  # bytes in a socket address on Linux, its NUL included
LONG = 220
OPEN_RUNTIME = """[runtimes.demo_open]
engine = "demo"
models = ["demo-1"]
sandbox = "none"
"""


def long_path(length: int, prefix: str = "arl-") -> Path:
    """A folder path of exactly `length` bytes (not made): nested folders in a short temp dir."""
    path = short_tmpdir(prefix)
    while len(str(path)) < length - 51:
        path = path / ("d" * 49)
    return path / ("h" * (length - len(str(path)) - 1))


def long_home(length: int = LONG) -> Home:
    home = Home(long_path(length)).ensure()
    (home.root / "config.toml").write_text(TEST_CONFIG + OPEN_RUNTIME)
    assert len(os.fsencode(home.root)) == length
    return home


@pytest.fixture
def long_daemon(request: pytest.FixtureRequest) -> Iterator[DaemonProcess]:
    """A daemon in a home of `request.param` bytes (LONG unless parametrized)."""
    home = long_home(getattr(request, "param", LONG))
    daemon = DaemonProcess(home).start()
    yield daemon
    daemon.stop()
    remove_home(home)


def transcript_text(daemon: DaemonProcess, agent_id: str) -> str:
    items = daemon.call("transcript", {"agent_id": agent_id})["items"]
    return "\n".join(item["content"] for item in items if item["role"] == "tool")


@pytest.mark.parametrize("long_daemon", [60, LONG], indirect=True)
def test_a_sandboxed_demo_agent_reaches_its_worker_tools_in_a_long_home(long_daemon, workdir):
    """60 bytes is a home like /home/firstname.lastname/.agent-run under a CI folder: its
    agents' worker sockets are already too long for a socket address."""
    home = long_daemon.home
    agent = long_daemon.call(
        "start",
        {"task": "shell: echo inside\nfinish: done in a long home", "workdir": str(workdir)},
    )
    result = long_daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})
    view = result["agent"]
    assert view["state"] == "succeeded", view["execution"]
    assert view["sandbox"] == "bubblewrap"
    assert "recorded (finish" in transcript_text(long_daemon, agent["id"])  # through the gate
    worker = home.execution_dir(agent["id"], view["execution"]["id"]) / "sandbox" / "worker.sock"
    assert len(os.fsencode(worker)) >= SUN_PATH  # sharpness: no socket address holds it
    for path in (home.socket_path, home.wake_path):  # the daemon's, owner-only as ever
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_sandbox_cannot_reach_the_daemons_socket_through_the_homes_folder(long_daemon):
    """The model's shell tries the same trick on `api.sock`, from a workdir that contains the
    home: masked inside the sandbox, it is not there to open; without the sandbox it is."""
    home = long_daemon.home
    script = (
        f"import os, socket; f = os.open('{home.root}', os.O_PATH | os.O_DIRECTORY); "
        "socket.socket(socket.AF_UNIX).connect(f'/proc/self/fd/{f}/api.sock'); "
        "print('ESCAPED-socket')"
    )
    probe = f'shell: python3 -c "{script}" 2>&1; echo probed'
    for runtime, escaped in (("demo", False), ("demo_open", True)):
        agent = long_daemon.call(
            "start", {"task": probe, "workdir": str(home.root.parent), "runtime": runtime}
        )
        result = long_daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})
        assert result["agent"]["state"] == "succeeded", result["agent"]["execution"]
        said = transcript_text(long_daemon, agent["id"])
        assert "probed" in said and ("ESCAPED-socket" in said) is escaped, (runtime, said)


def test_a_ranked_batch_runs_to_its_end_in_a_long_home(long_daemon):
    repo = make_repo()
    batch = long_daemon.call(
        "batch_start",
        {
            "runtime": "demo",
            "workflow": "ranked",
            "project": str(repo),
            "runs": 1,
            "reviewers": 1,
            "prompt": CANDIDATE,
            "review_prompt": "score: 70",
        },
    )
    done = wait_batch(long_daemon, batch["id"])
    assert done["state"] == "completed", done
    [candidate] = runs_of(done, "candidate")
    [reviewer] = runs_of(done, "reviewer")
    assert reviewer["state"] == "succeeded" and candidate["score"] == 70  # submit_score, gated


def test_the_web_ui_serves_a_page_from_a_daemon_in_a_long_home(long_daemon, workdir):
    from tests.web_harness import WebProcess

    agent = long_daemon.call("start", {"task": "answer: seen on the web", "workdir": str(workdir)})
    web = WebProcess(long_daemon.home).start()
    try:
        client = web.client()
        page = client.get(f"/agents/{agent['id']}")
        client.close()
        assert page.status_code == 200, page.text
        assert agent["id"] in page.text
    finally:
        web.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_agent_run_mcp_starts_and_waits_on_an_agent_in_a_long_home(long_daemon, workdir):
    async with mcp_session(long_daemon.home) as session:
        started = await session.call_tool(
            "start", {"task": "answer: over mcp", "workdir": str(workdir)}
        )
        assert not started.is_error, started.content
        agent_id = started.structured_content["id"]
        waited = await session.call_tool("wait", {"agent_id": agent_id, "timeout_seconds": 60})
        assert waited.structured_content["agent"]["state"] == "succeeded", waited.content


def test_the_copy_paste_client_of_docs_api_reaches_a_daemon_in_a_long_home(long_daemon, workdir):
    api_doc = Path(__file__).resolve().parent.parent / "docs" / "api.md"
    block = re.search(r"```python\n(.*?)```", api_doc.read_text(), re.S).group(1)
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=workdir,
        env={**os.environ, "AGENT_RUN_HOME": str(long_daemon.home.root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "succeeded hello from the socket"


def test_doctor_binds_and_connects_a_socket_in_the_home(long_daemon):
    done = cli(long_daemon.home, "doctor", "--format", "json")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    [sockets] = [c for c in report["checks"] if c["check"] == "sockets"]
    assert sockets["level"] == "ok" and "/proc/self/fd" in sockets["detail"], sockets
    assert not list(long_daemon.home.root.glob(".socket-probe-*"))  # the probe is removed


def test_a_wake_datagram_reaches_a_listener_whose_path_no_address_holds():
    path = long_path(LONG, "arw-") / "wake.sock"
    path.parent.mkdir(mode=0o700, parents=True)
    listener = wake.listen(path)
    assert listener is not None and stat.S_IMODE(path.stat().st_mode) == 0o600
    waker = wake.Waker(path)
    waker.wake()
    waker.wake()
    wait_for(lambda: wake.drain(listener) == 2, timeout=10, what="both nudges")
    waker.close()
    listener.close()


_CONNECT_THROUGH_THE_FOLDER = """
import os, socket, sys
path = sys.argv[1]
folder = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
try:
    sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
except OSError as exc:
    print(type(exc).__name__)
else:
    print(sock.makefile("rb").readline().decode().strip())
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another uid")
def test_another_user_cannot_reach_the_socket_through_its_folders_descriptor(long_daemon):
    """O_PATH opens a folder without reading it, but what is in it is still looked up with the
    caller's permissions: the 0700 home keeps everyone else out, even with the socket file
    itself opened up, as with a short path."""
    home = long_daemon.home
    for folder in home.root.parents:
        if folder not in (Path("/"), Path("/tmp")):
            folder.chmod(0o711)  # everything up to the home can be passed through
    home.socket_path.chmod(0o666)

    def as_nobody() -> str:
        done = subprocess.run(
            ["/usr/bin/python3", "-c", _CONNECT_THROUGH_THE_FOLDER, str(home.socket_path)],
            capture_output=True,
            text=True,
            timeout=30,
            user=65534,
            group=65534,
            extra_groups=[],
            cwd="/",
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert as_nobody() == "PermissionError"
    home.root.chmod(0o711)  # sharpness: opened up, the same lines reach the daemon's uid check
    try:
        assert json.loads(as_nobody())["error"]["data"]["code"] == "PermissionDenied"
    finally:
        home.root.chmod(0o700)


# -- where there is no /proc/self/fd ----------------------------------------------------------


def without_proc(
    argv: list[str], writable: Path, env: dict[str, str]
) -> subprocess.CompletedProcess:
    """`python -m agent_run ARGV` in a bubblewrap sandbox that mounts no /proc: a system where
    sockets can only be addressed by their path (macOS, BSD), forced on this one."""
    binds = ordered(system_binds() + python_binds() + [Bind(str(writable), str(writable), True)])
    command = [sys.executable, "-m", "agent_run", *argv]
    sandbox = bwrap_argv(binds, command, "/", bwrap_path())
    at = sandbox.index("--proc")
    del sandbox[at : at + 2]  # no /proc inside
    return subprocess.run(
        sandbox, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env}
    )


def test_without_proc_fd_init_doctor_and_serve_name_a_path_too_long_and_pass_a_short_one():
    from agent_run.system.unix_sockets import MAX_PATH_BYTES

    long = long_path(LONG)
    tmp = Path(*long.parts[:3])  # /tmp/arl-...: what the sandbox may write
    quiet = {"AGENT_RUN_NO_AUTOSTART": "1"}
    init, serve, doctor = (
        without_proc(["--home", str(long), "--format", "json", *argv], tmp, quiet)
        for argv in (["init"], ["api", "serve"], ["doctor"])
    )
    for done in (init, serve, doctor):
        assert done.returncode == 1 and "worker socket" in done.stdout + done.stderr, done
    error = json.loads(init.stdout)["error"]
    assert error["code"] == "InvalidRequest" and error["field"] == "home"
    assert error["details"]["bytes"] > MAX_PATH_BYTES
    assert f"is {error['details']['bytes']} bytes" in error["message"]
    assert str(long) in error["message"]
    [sockets] = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "sockets"]
    assert sockets["level"] == "bad" and str(long) in sockets["detail"], sockets
    short = short_tmpdir("ars-")
    doctor = without_proc(["--home", str(short / "h"), "--format", "json", "doctor"], short, quiet)
    [sockets] = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "sockets"]
    assert sockets["level"] == "ok" and "by path" in sockets["detail"], sockets


# -- a host: both ends of the ssh link in long homes ------------------------------------------


def remote_long_home(host: RemoteHost) -> Path:
    """An agent-run home of LONG bytes in the host user's own folder, initialised by that user."""
    path = host.user_home / "long"
    while len(str(path)) < LONG - 51:
        path = path / ("d" * 49)
    path = path / ("h" * (LONG - len(str(path)) - 1))
    for argv in (
        ["mkdir", "-p", str(host.user_home / "work")],
        [str(host.agent_run), "--home", str(path), "init"],
        ["sh", "-c", f"cat > '{path}/config.toml'"],
    ):
        done = host.as_user(*argv, input=REMOTE_CONFIG)
        assert done.returncode == 0, done.stderr
    return path


@pytest.mark.sshd
@pytest.mark.xdist_group("sshd")
def test_a_host_agent_runs_with_long_homes_at_both_ends(reachable: RemoteHost):  # noqa: F811
    remote = remote_long_home(reachable)
    home = Home(long_path(LONG)).ensure()
    host_table = reachable.host_toml("box", home=json.dumps(str(remote)))
    (home.root / "config.toml").write_text(TEST_CONFIG + "\n" + host_table)
    daemon = DaemonProcess(home).start()
    try:
        agent = daemon.call(
            "start",
            {"host": "box", "workdir": "~/work", "task": "steps: 2\nfinish: made on the host"},
        )
        result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 120})
        assert result["agent"]["state"] == "succeeded", result["agent"]
        assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "made on the host"
        assert "recorded (finish" in transcript_text(daemon, agent["id"])  # the host's gate
    finally:
        daemon.stop()
        reachable.as_user(str(reachable.agent_run), "--home", str(remote), "api", "stop")
        reachable.as_user("rm", "-rf", str(reachable.user_home / "long"))
        remove_home(home)
