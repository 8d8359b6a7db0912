"""Running real engine CLIs under agent-run against the test suite's loopback mock provider."""

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_run.system.home import Home
from tests.harness import TEST_CONFIG, DaemonProcess, make_home, remove_home, wait_for
from tests.support.mock_provider import Dynamic, MockProvider, Reply

ROOT = Path(__file__).parent.parent
_NODE_BIN = ROOT / "node_modules" / ".bin"
# Set by conftest before each test's fixtures: whether the running test is marked `engines`.
running_test_is_marked = {"engines": False}


def node_bin() -> Path:
    """node_modules/.bin, where the real engine CLIs are; only an `engines` test may use it, so
    `--fast` (which deselects those) never needs npm."""
    assert running_test_is_marked["engines"], (
        "this test runs a real engine CLI from node_modules: mark it @pytest.mark.engines"
    )
    return _NODE_BIN


PLANTED_KEY = "sk-planted-4d1c9e77a0b24f3c8e55aa17"
KEY_VARIABLE = "ARUN_TEST_PROVIDER_KEY"


def free_port() -> int:
    """A loopback port with nothing listening (for the refused-connection fault)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def runtime_block(name: str, engine: str, base_url: str, model: str, **knobs: Any) -> str:
    binary = node_bin() / {"glm": "claude"}.get(engine, engine)
    lines = [
        f"[runtimes.{name}]",
        f'engine = "{engine}"',
        f'binary = "{binary}"',
        f'models = ["{model}"]',
        f'default_model = "{model}"',
        "allow_plain_http_loopback = true",
        f'base_url = "{base_url}"',
        f'auth = {{ env = "{KEY_VARIABLE}" }}',
    ]
    defaults = {
        "max_retries": 0,
        "request_timeout_seconds": 4.0,
        # Room for an engine's silent start on a loaded machine: Qwen Code's first request came
        # 5-6 s after its start when idle, 16 s with four at once beside three CPU hogs, and
        # twice over 20 s in the full suite on a slower machine (the agent ended `stalled`).
        # A test about stalls sets its own.
        "stall_seconds": 60.0,
        "retry_give_up_seconds": 20.0,
    }
    for key, value in {**defaults, **knobs}.items():
        lines.append(f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


@contextmanager
def engine_daemon(
    block: str, key: str = PLANTED_KEY, env: dict[str, str] | None = None
) -> Iterator[tuple[Home, DaemonProcess]]:
    home = make_home(TEST_CONFIG + "\n" + block)
    daemon = DaemonProcess(home, env={KEY_VARIABLE: key, **(env or {})}).start()
    try:
        yield home, daemon
    finally:
        daemon.stop()
        remove_home(home)


def run_agent(
    daemon: DaemonProcess,
    runtime: str,
    task: str,
    workdir: Path,
    timeout: float = 120,
    **extra: Any,
) -> dict[str, Any]:
    agent = daemon.call(
        "start", {"task": task, "workdir": str(workdir), "runtime": runtime, **extra}
    )
    return wait_done(daemon, agent["id"], timeout)


def wait_done(daemon: DaemonProcess, agent_id: str, timeout: float = 120) -> dict[str, Any]:
    # The socket must outlast the wait (the default client gives up at 60 s).
    with daemon.client(timeout=timeout + 30) as client:
        result = client.call("wait", {"agent_id": agent_id, "timeout_seconds": timeout})
    assert not result["timed_out"], result
    return result["agent"]


def files_containing(root: Path, needle: str) -> list[str]:
    data = needle.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


class HeldReply:
    """A model reply the provider holds back until `release`: the engine waits on it, alive."""

    def __init__(self, reply: Reply) -> None:
        self.released = threading.Event()
        self.reply = Dynamic(lambda _request: self.released.wait(60) and reply)

    def release(self) -> None:
        self.released.set()


def engine_argv_while_held(provider: MockProvider, home: Home, held: HeldReply) -> list[bytes]:
    """The command lines of the engine's process group, read while the engine waits on `held`
    (its first model reply); then the reply is released."""
    from agent_run.supervisor.identity import group_members
    from tests.harness import db_rows

    try:
        assert provider.wait_for(lambda reqs: any(r.role == "main" for r in reqs), timeout=90), [
            (r.path, r.role) for r in provider.requests
        ]
        pgid = wait_for(lambda: db_rows(home, "SELECT engine_pid FROM executions")[0]["engine_pid"])
        argv = [Path(f"/proc/{pgid}/cmdline").read_bytes()]  # the leader waits on us: it is alive
        for pid in set(group_members(pgid)) - {pgid}:
            try:
                argv.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            except FileNotFoundError:
                continue  # a short-lived helper that ended meanwhile
        return argv
    finally:
        held.release()


def engine_group_gone(home: Home, agent_id: str) -> bool:
    from tests.harness import db_rows, pgid_alive

    rows = db_rows(home, "SELECT engine_pid FROM executions WHERE agent_id = ?", (agent_id,))
    return all(not r["engine_pid"] or not pgid_alive(r["engine_pid"]) for r in rows)


__all__ = ["MockProvider", "wait_for"]
