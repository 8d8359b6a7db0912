"""What only Codex (`codex app-server`) does, against the mock provider: its read-only sandbox,
and a provider silent before headers (Codex never times that out itself). The scenarios every
engine shares are in test_engine_contract.py."""

import pytest

from tests.engine_harness import engine_daemon, engine_group_gone, run_agent, runtime_block
from tests.support.mock_provider import Fault, MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

MODEL = "gpt-5.5"  # a slug Codex knows, so it advertises its full tool set (apply_patch too)


def codex_block(base_url: str, **knobs) -> str:
    return runtime_block("r", "codex", base_url, MODEL, **knobs)


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


@pytest.fixture
def rig(provider):
    """(home, daemon) with runtime `r` = Codex pointed at the mock provider (Responses at /v1)."""
    with engine_daemon(codex_block(provider.url + "/v1")) as pair:
        yield pair


def test_read_only_profile_writes_nothing_in_the_read_only_workdir(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall("exec_command", {"cmd": "echo hi > made.txt; echo rc=$?"}), Text("Tried.")
    )
    view = run_agent(daemon, "r", "Try to write.", workdir, profile="read_only")
    assert view["state"] == "succeeded", view
    assert not (workdir / "made.txt").exists()
    output = provider.main_requests()[1].tool_results()[0].output
    assert "Read-only file system" in output, output  # agent-run's sandbox: the workdir is ro


def test_silence_before_headers_is_stalled_by_the_watchdog(provider, workdir):
    # Codex has no timeout before response headers and never ends on its own.
    with engine_daemon(codex_block(provider.url + "/v1", stall_seconds=4.0)) as (home, daemon):
        provider.add(Fault.silent_before_headers(times=None))
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=60)
        assert (view["state"], view["failure_kind"]) == ("failed", "stalled"), view["execution"]
        assert engine_group_gone(home, view["id"])
