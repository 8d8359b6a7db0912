"""The model cannot read the provider key: each real engine CLI, its shell tool running `env`.

The engine is given the supervisor's credential broker and a per-execution token; the key
stays in the supervisor. The mock provider must still receive the real key (the broker
swapped it in), and no process the engine starts, no tool output, transcript, answer or file
under the home, the agent directory or the workdir holds it in any stored form.
"""

import json
import os
from pathlib import Path

import pytest

from agent_run.supervisor.redact import secret_forms
from tests.engine_harness import engine_daemon, run_agent, runtime_block, wait_done
from tests.harness import db_rows, wait_for
from tests.support.mock_provider import MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

# A key an engine's JSON must escape; no newline, since it travels in an HTTP header.
HOSTILE_KEY = 'sk-live"quote\\back-é-4d1c9e77a0b2'
MODELS = {
    "claude": "claude-sonnet-4-5",
    "glm": "glm-4.6",
    "qwen": "qwen3-coder-plus",
    "codex": "gpt-5.5",
}
SUFFIX = {"qwen": "/v1", "codex": "/v1"}
PROBE = "env; echo; cat $HOME/.*/*.json $HOME/.*/*.toml 2>/dev/null; echo probe-done; sleep 3"


def shell_call(engine: str) -> ToolCall:
    if engine == "codex":
        return ToolCall("exec_command", {"cmd": PROBE})
    name = "run_shell_command" if engine == "qwen" else "Bash"
    return ToolCall(name, {"command": PROBE, "description": "probe"})


def key_header(engine: str, request) -> str:
    if engine == "claude":
        return request.headers.get("x-api-key", "")
    return request.headers.get("authorization", "").removeprefix("Bearer ")


def forms() -> list[bytes]:
    return [f.encode() for f in secret_forms(HOSTILE_KEY)] + [HOSTILE_KEY.encode("latin-1")]


def holders(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path}: {f!r}" for f in forms() if f in data]
    return found


def descendant_environs(root: int) -> dict[int, bytes]:
    """The environment of the engine and every live process descended from it (some engines
    start their shells in new process groups, so the group is not enough)."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            parents[int(entry)] = int(
                Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
            )
        except (OSError, IndexError, ValueError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    out = {}
    for pid in tree:
        try:
            out[pid] = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
    return out


@pytest.mark.parametrize("engine", ["claude", "glm", "qwen", "codex"])
def test_model_running_env_in_its_shell_never_sees_the_key(engine, workdir):
    with MockProvider() as provider:
        provider.add(shell_call(engine), Text("Looked around."))
        block = runtime_block("r", engine, provider.url + SUFFIX.get(engine, ""), MODELS[engine])
        with engine_daemon(block, key=HOSTILE_KEY) as (home, daemon):
            agent = daemon.call(
                "start", {"task": "Run the probe.", "workdir": str(workdir), "runtime": "r"}
            )
            pgid = wait_for(
                lambda: db_rows(home, "SELECT engine_pid FROM executions")[0]["engine_pid"]
            )
            # While the probe's `sleep` runs, every process descended from the engine is checked.
            wait_for(lambda: any(_runs_sleep(pid) for pid in descendant_environs(pgid)), timeout=90)
            environs = descendant_environs(pgid)
            assert len(environs) >= 3, "the engine, its shell and the probe"
            assert {pid: f for pid, env in environs.items() for f in forms() if f in env} == {}
            view = wait_done(daemon, agent["id"])
            assert view["state"] == "succeeded", view
            items = daemon.call("transcript", {"agent_id": agent["id"]})["items"]
            answer = daemon.call("answer", {"agent_id": agent["id"]})["text"]
            requests = provider.main_requests()
            output = requests[1].tool_results()[0].output
            assert "PATH=" in output and "probe-done" in output, output
            assert all(f.decode("latin-1") not in output for f in forms())
            assert "é-4d1c9e77a0b2" not in json.dumps(items, ensure_ascii=False) + answer
            assert all(
                key_header(engine, r) == HOSTILE_KEY.encode().decode("latin-1")
                or key_header(engine, r) == HOSTILE_KEY
                for r in requests
            ), "the broker swapped the real key in"
            assert all("4d1c9e77a0b2" not in json.dumps(r.body) for r in requests)
        assert holders(home.root) == [] and holders(workdir) == []


def _runs_sleep(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep")
    except OSError:
        return False


def test_broker_records_the_providers_rate_limit_headers_as_signals(workdir):
    from tests.support.mock_provider import Fault

    with MockProvider() as provider:
        provider.add(Fault.http(429, retry_after=1, times=None))
        with engine_daemon(runtime_block("r", "claude", provider.url, MODELS["claude"])) as (
            home,
            daemon,
        ):
            view = run_agent(daemon, "r", "Say hello.", workdir, timeout=120)
            assert (view["state"], view["failure_kind"]) == ("failed", "rate_limited"), view[
                "execution"
            ]
            rows = db_rows(
                home,
                "SELECT kind, status, retry_after, detail FROM provider_signals "
                "WHERE status = 429 AND retry_after IS NOT NULL",
            )
    assert rows and rows[0]["kind"] == "rate_limited" and rows[0]["retry_after"] == 1.0
    assert json.loads(rows[0]["detail"]) == {"retry-after": "1"}
