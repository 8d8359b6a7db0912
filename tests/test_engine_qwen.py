"""What only Qwen Code does, against the mock provider (Chat Completions at /v1): its read-only
tool set, its outer rate-limit loop and its silent inner retries. The scenarios every engine
shares are in test_engine_contract.py.

Qwen Code retries HTTP 429/5xx and refused connections inside the CLI (7 attempts, 1.5 s to
30 s of backoff, no setting for it) and prints nothing meanwhile. A 429 or 503 that carries a
`retry-after` is retried after that delay instead, so those are scripted with `retry_after=1`.
HTTP 500, 529 and a refused connection take 75-100 s each whatever we do; they run
concurrently in one test, with a `stall_seconds` that outlasts the silent retries.
"""

import json
import shutil
import threading

import pytest

from tests.engine_harness import (
    PLANTED_KEY,
    engine_daemon,
    engine_group_gone,
    files_containing,
    free_port,
    run_agent,
    runtime_block,
)
from tests.harness import db_rows, short_tmpdir
from tests.support.mock_provider import Fault, MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

MODEL = "qwen3-coder-plus"


def qwen_runtime(name: str, url: str, **knobs) -> str:
    return runtime_block(name, "qwen", url + "/v1", MODEL, **knobs)


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


@pytest.fixture
def rig(provider):
    """(home, daemon) with runtime `r` = Qwen Code pointed at the mock provider."""
    with engine_daemon(qwen_runtime("r", provider.url)) as pair:
        yield pair


def test_read_only_profile_offers_no_write_tools_but_finish_works(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall("mcp__agent_run_worker__finish", {"summary": "Read it all.", "status": "done"}),
        Text("Done."),
    )
    extra = short_tmpdir("arx-")
    try:
        view = run_agent(
            daemon,
            "r",
            "Look, then call finish.",
            workdir,
            profile="read_only",
            read_roots=[str(extra)],
        )
    finally:
        shutil.rmtree(extra, ignore_errors=True)
    execution = view["execution"]
    assert view["state"] == "succeeded", (
        execution["failure_kind"],
        execution["failure_message"],
        [r.tool_names() for r in provider.main_requests()],
    )
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "Read it all."
    request = provider.main_requests()[0]
    assert "read_file" in request.tool_names()
    assert not {"run_shell_command", "write_file", "edit"} & set(request.tool_names())
    assert str(extra) in request.text(), "a read root is one of the workspace directories"


def test_a_429_that_never_clears_ends_rate_limited_with_its_signal_row(provider, workdir):
    """After its silent inner retries Qwen Code starts an outer rate-limit loop ("Retrying in
    60s (attempt 1/1)") whose `system/retry` lines carry no status: the status on its stderr
    decides the give-up, not a guess of network_error."""
    block = qwen_runtime(
        "r", provider.url, max_retries=1, stall_seconds=40.0, retry_give_up_seconds=5.0
    )
    with engine_daemon(block) as (home, daemon):
        provider.add(Fault.http(429, retry_after=1, times=None))
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=100)
        assert (view["state"], view["failure_kind"]) == ("failed", "rate_limited"), view[
            "execution"
        ]["failure_message"]
        message = view["execution"]["failure_message"]
        assert "only retried" in message and "last status: 429" in message, message
        retries = db_rows(
            home, "SELECT data FROM events WHERE agent_id = ? AND kind = 'retry'", (view["id"],)
        )
        assert retries and "rate-limit retry 1/1" in json.loads(retries[0]["data"])["message"]
        signals = db_rows(
            home, "SELECT kind, status FROM provider_signals WHERE agent_id = ?", (view["id"],)
        )
        assert ("rate_limited", 429) in {(s["kind"], s["status"]) for s in signals}, [
            dict(s) for s in signals
        ]
        assert engine_group_gone(home, view["id"])


def test_silently_retried_faults_still_end_with_their_kind(workdir):
    """500, 529 and a refused connection: 7 silent attempts inside the CLI, run side by side."""
    with (
        MockProvider([Fault.http(500, times=None)]) as p500,
        MockProvider([Fault.http(529, times=None)]) as p529,
    ):
        refused = f"http://127.0.0.1:{free_port()}"
        knobs = {"stall_seconds": 150.0}
        block = (
            qwen_runtime("r500", p500.url, **knobs)
            + qwen_runtime("r529", p529.url, **knobs)
            + qwen_runtime("refused", refused, **knobs)
        )
        expected = {
            "r500": "provider_error",
            "r529": "provider_overloaded",
            "refused": "network_error",
        }
        with engine_daemon(block) as (home, daemon):
            agents = {
                runtime: daemon.call(
                    "start", {"task": "Say hello.", "workdir": str(workdir), "runtime": runtime}
                )["id"]
                for runtime in expected
            }
            views: dict[str, dict] = {}

            def wait(runtime: str) -> None:
                with daemon.client(
                    timeout=200
                ) as client:  # the default 60 s socket timeout is too short
                    result = client.call(
                        "wait", {"agent_id": agents[runtime], "timeout_seconds": 180}
                    )
                views[runtime] = result["agent"]

            waiters = [threading.Thread(target=wait, args=(r,)) for r in expected]
            for thread in waiters:
                thread.start()
            for thread in waiters:
                thread.join()
            got = {runtime: (v["state"], v["failure_kind"]) for runtime, v in views.items()}
            assert got == {runtime: ("failed", kind) for runtime, kind in expected.items()}, views
            assert all(engine_group_gone(home, agent_id) for agent_id in agents.values())
            assert len(p500.main_requests()) == 7 and len(p529.main_requests()) == 7
            assert files_containing(home.root, PLANTED_KEY) == []
