"""What only Claude Code (and GLM through it) does, against the mock provider: a steer sent while
a tool runs joins that turn, a refused key is final at once despite its retries, and the
credential broker records the provider's rate-limit headers as signals. The scenarios every
engine shares are in test_engine_contract.py (per-engine facts: tests/engine_cases.py)."""

import json

import pytest

from tests.engine_cases import BY_NAME
from tests.engine_harness import (
    engine_daemon,
    engine_group_gone,
    run_agent,
    runtime_block,
    wait_done,
)
from tests.harness import db_rows, wait_for
from tests.support.mock_provider import Dynamic, Fault, MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

MODELS = {name: BY_NAME[name].model for name in ("claude", "glm")}


@pytest.fixture(params=["claude", "glm"])
def engine(request):
    return request.param


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


def test_steer_during_a_tool_call_joins_the_turn_and_ends_with_the_steered_answer(
    engine, provider, workdir
):
    """Claude Code takes a message sent while a tool runs into the running turn (in the tool
    result) and ends both with one `result`: no second turn comes, and the answer must be
    kept at once, long before `stall_seconds`."""
    started = workdir / "tool-started"
    provider.add(
        ToolCall(
            "Bash",
            {
                "command": f"touch {started} && sleep 5 && echo slept",
                "description": "a slow command",
            },
        ),
        Dynamic(
            lambda request: Text(
                "Steered answer." if "second thing" in request.text() else "Unsteered answer."
            )
        ),
    )
    block = runtime_block("r", engine, provider.url, MODELS[engine], stall_seconds=100.0)
    with engine_daemon(block) as (home, daemon):
        agent = daemon.call(
            "start", {"task": "Run the slow command.", "workdir": str(workdir), "runtime": "r"}
        )
        wait_for(started.exists, timeout=60, what="the shell tool to start")
        steer = daemon.call("steer", {"agent_id": agent["id"], "text": "Also do the second thing."})
        assert steer["state"] == "delivered", steer
        view = wait_done(daemon, agent["id"], timeout=50)  # stall_seconds is 100
        assert view["state"] == "succeeded", view
        assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "Steered answer."
        requests = provider.main_requests()
        assert len(requests) == 2, (
            "no second turn: the steer went to the model with the tool result"
        )
        assert "second thing" in requests[1].text()
        kinds = [
            r["kind"]
            for r in db_rows(home, "SELECT kind FROM events WHERE agent_id = ?", (agent["id"],))
        ]
        assert "steer_joined" in kinds and "idle_after_completion" not in kinds
        assert engine_group_gone(home, agent["id"])


def test_a_refused_key_ends_auth_failed_at_once_not_after_the_give_up_window(
    engine, provider, workdir
):
    """Claude Code retries a 401 up to max_retries times (about two minutes for nine), each
    retry event saying 401; two in a row are final."""
    provider.add(Fault.http(401, times=None))
    block = runtime_block(
        "r",
        engine,
        provider.url,
        MODELS[engine],
        max_retries=9,
        stall_seconds=600.0,
        retry_give_up_seconds=600.0,
    )
    with engine_daemon(block) as (home, daemon):
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=50)  # give-up: 600 s
        assert (view["state"], view["failure_kind"]) == ("failed", "auth_failed"), view["execution"]
        assert "401" in view["execution"]["failure_message"]
        retries = db_rows(
            home, "SELECT data FROM events WHERE agent_id = ? AND kind = 'retry'", (view["id"],)
        )
        assert [json.loads(r["data"])["status"] for r in retries] == [401, 401], [
            r["data"] for r in retries
        ]
        assert len(provider.main_requests()) <= 3
        assert engine_group_gone(home, view["id"])


@pytest.mark.parametrize("engine", ["claude", "glm"])
def test_each_429_is_one_provider_signal(engine, workdir):
    """The broker records the provider's 429 with its headers; the engine's own retry of it
    (`system/api_retry`) is the same response, not a second signal."""
    with MockProvider() as provider:
        provider.add(Fault.http(429, retry_after=0, times=2))
        provider.add(Text("hello after two rate limits"))
        block = runtime_block("r", engine, provider.url, MODELS[engine], max_retries=3)
        with engine_daemon(block) as (home, daemon):
            view = run_agent(daemon, "r", "Say hello.", workdir, timeout=120)
            ex = view["execution"]
            assert view["state"] == "succeeded", (ex["failure_kind"], ex["failure_message"])
            served = [
                r for r in provider.main_requests() if getattr(r.reply, "status", None) == 429
            ]
            signals = db_rows(
                home,
                "SELECT kind, status FROM provider_signals WHERE agent_id = ? AND status = 429",
                (view["id"],),
            )
    assert len(served) == 2
    assert [(s["kind"], s["status"]) for s in signals] == [("rate_limited", 429)] * 2


def test_broker_records_the_providers_rate_limit_headers_as_signals(workdir):
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
