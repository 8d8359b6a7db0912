"""Running real engine CLIs under agent-run against the test suite's loopback mock provider."""

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_run.home import Home
from tests.harness import TEST_CONFIG, DaemonProcess, make_home, remove_home, wait_for
from tests.support.mock_provider import MockProvider

ROOT = Path(__file__).parent.parent
NODE_BIN = ROOT / "node_modules" / ".bin"
PLANTED_KEY = "sk-planted-4d1c9e77a0b24f3c8e55aa17"
KEY_VARIABLE = "ARUN_TEST_PROVIDER_KEY"


def free_port() -> int:
    """A loopback port with nothing listening (for the refused-connection fault)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def runtime_block(name: str, engine: str, base_url: str, model: str, **knobs: Any) -> str:
    binary = NODE_BIN / {"glm": "claude"}.get(engine, engine)
    lines = [f"[runtimes.{name}]", f'engine = "{engine}"', f'binary = "{binary}"',
             f'models = ["{model}"]', f'default_model = "{model}"', "allow_plain_http_loopback = true",
             f'base_url = "{base_url}"', f'auth = {{ env = "{KEY_VARIABLE}" }}']
    defaults = {"max_retries": 0, "request_timeout_seconds": 4.0, "stall_seconds": 20.0,
                "retry_give_up_seconds": 20.0}
    for key, value in {**defaults, **knobs}.items():
        lines.append(f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"')
    return "\n".join(lines) + "\n"


@contextmanager
def engine_daemon(block: str, key: str = PLANTED_KEY) -> Iterator[tuple[Home, DaemonProcess]]:
    home = make_home(TEST_CONFIG + "\n" + block)
    daemon = DaemonProcess(home, env={KEY_VARIABLE: key}).start()
    try:
        yield home, daemon
    finally:
        daemon.stop()
        remove_home(home)


def run_agent(daemon: DaemonProcess, runtime: str, task: str, workdir: Path, timeout: float = 120,
              **extra: Any) -> dict[str, Any]:
    agent = daemon.call("start", {"task": task, "workdir": str(workdir), "runtime": runtime, **extra})
    return wait_done(daemon, agent["id"], timeout)


def wait_done(daemon: DaemonProcess, agent_id: str, timeout: float = 120) -> dict[str, Any]:
    result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": timeout})
    assert not result["timed_out"], result
    return result["agent"]


def files_containing(root: Path, needle: str) -> list[str]:
    data = needle.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


def engine_group_gone(home: Home, agent_id: str) -> bool:
    from tests.harness import db_rows, pgid_alive

    rows = db_rows(home, "SELECT engine_pid FROM executions WHERE agent_id = ?", (agent_id,))
    return all(not r["engine_pid"] or not pgid_alive(r["engine_pid"]) for r in rows)


__all__ = ["MockProvider", "wait_for"]
