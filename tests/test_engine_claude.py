"""The real Claude Code CLI (and GLM through it) under agent-run, against the mock provider."""

import json
import time

import pytest

from tests.engine_harness import (
    PLANTED_KEY,
    HeldReply,
    engine_argv_while_held,
    engine_daemon,
    engine_group_gone,
    files_containing,
    free_port,
    run_agent,
    runtime_block,
    wait_done,
)
from tests.harness import db_rows, wait_for
from tests.support.mock_provider import Dynamic, Fault, MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

MODELS = {"claude": "claude-sonnet-4-5", "glm": "glm-4.6"}


@pytest.fixture(params=["claude", "glm"])
def engine(request):
    return request.param


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


@pytest.fixture
def rig(engine, provider):
    """(home, daemon) with runtime `r` = this engine pointed at the mock provider."""
    with engine_daemon(runtime_block("r", engine, provider.url, MODELS[engine])) as pair:
        yield pair


def auth_header(engine: str, request) -> str:
    if engine == "glm":
        return request.headers.get("authorization", "")
    return request.headers.get("x-api-key", "")


def test_text_answer_with_the_key_sent_only_as_its_auth_header(engine, provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("The answer is 42."))
    view = run_agent(daemon, "r", "What is six times seven?", workdir)
    assert view["state"] == "succeeded", view
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "The answer is 42."
    request = provider.main_requests()[0]
    assert PLANTED_KEY in auth_header(engine, request)
    assert request.body["model"] == MODELS[engine]
    assert "six times seven" in request.text()
    assert view["execution"]["usage"], "usage is recorded per execution"
    assert engine_group_gone(home, view["id"])


def test_shell_tool_call_runs_and_its_output_reaches_the_model(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall("Bash", {"command": "echo tool-ran-$((40+2))", "description": "marker"}),
        Text("The command printed 42."),
    )
    view = run_agent(daemon, "r", "Run the marker command.", workdir)
    assert view["state"] == "succeeded", view
    results = provider.main_requests()[1].tool_results()
    assert "tool-ran-42" in results[0].output
    items = daemon.call("transcript", {"agent_id": view["id"]})["items"]
    assert any(i["role"] == "tool_call" and i["name"] == "Bash" for i in items)


def test_file_written_in_the_workdir(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall("Write", {"file_path": str(workdir / "hello.txt"), "content": "hi there\n"}),
        Text("Wrote hello.txt."),
    )
    view = run_agent(daemon, "r", "Write hello.txt.", workdir)
    assert view["state"] == "succeeded", view
    assert (workdir / "hello.txt").read_text() == "hi there\n"


def test_finish_through_the_worker_tools_sets_answer_and_verdict(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall(
            "mcp__agent_run_worker__finish", {"summary": "Refactored the parser.", "status": "done"}
        ),
        Text("Done."),
    )
    view = run_agent(daemon, "r", "Refactor, then call finish.", workdir)
    assert view["state"] == "succeeded", view
    assert view["verdict"] == "done"
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "Refactored the parser."
    # The worker server got the capability token, not the provider key.
    assert files_containing(home.root, PLANTED_KEY) == []


def test_resume_continues_the_session_with_its_history(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("Remember: the code word is PLUM."))
    first = run_agent(daemon, "r", "Pick a code word.", workdir)
    assert first["state"] == "succeeded"
    provider.add(Text("The code word was PLUM."))
    daemon.call("resume", {"agent_id": first["id"], "prompt": "What was the code word?"})
    view = wait_done(daemon, first["id"])
    assert view["state"] == "succeeded" and view["execution"]["number"] == 2
    second_request = provider.main_requests()[-1]
    assert "Pick a code word" in second_request.text(), "resume must send the earlier turns"
    assert "code word is PLUM" in second_request.text()


def test_steer_is_queued_as_the_next_turn(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("Working on the first request...", seconds=4), Text("Steered answer."))
    agent = daemon.call(
        "start", {"task": "First request.", "workdir": str(workdir), "runtime": "r"}
    )
    assert provider.wait_for(lambda reqs: any(r.role == "main" for r in reqs), timeout=60)
    steer = daemon.call("steer", {"agent_id": agent["id"], "text": "Also do the second thing."})
    assert steer["state"] == "delivered", steer
    view = wait_done(daemon, agent["id"])
    assert view["state"] == "succeeded", view
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "Steered answer."
    assert "second thing" in provider.main_requests()[-1].text()


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


def test_cancel_mid_turn_interrupts_and_leaves_no_process(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("A very long answer " * 50, seconds=60))
    agent = daemon.call(
        "start", {"task": "Write a long answer.", "workdir": str(workdir), "runtime": "r"}
    )
    assert provider.wait_for(lambda reqs: any(r.role == "main" for r in reqs), timeout=60)
    daemon.call("cancel", {"agent_id": agent["id"]})
    view = wait_done(daemon, agent["id"], timeout=60)
    assert view["state"] == "cancelled"
    assert engine_group_gone(home, agent["id"])


FAULTS = [
    (Fault.http(401, times=None), "auth_failed"),
    (Fault.http(429, times=None), "rate_limited"),
    (Fault.http(500, times=None), "provider_error"),
    (Fault.http(529, times=None), "provider_overloaded"),
    (Fault.malformed(times=None), "stream_error"),
    (Fault.cut(times=None), "stream_error"),
    (Fault.silent_after_headers(times=None), "stalled"),
]


@pytest.mark.parametrize(("fault", "kind"), FAULTS, ids=[k for _, k in FAULTS])
def test_provider_fault_ends_failed_with_its_kind_and_no_process_left(
    provider, rig, workdir, fault, kind
):
    home, daemon = rig
    provider.add(fault)
    view = run_agent(daemon, "r", "Say hello.", workdir, timeout=180)
    assert (view["state"], view["failure_kind"]) == ("failed", kind), view["execution"]
    assert view["execution"]["answer_sha256"] is None
    assert engine_group_gone(home, view["id"])
    assert files_containing(home.root, PLANTED_KEY) == []


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


def test_refused_connection_is_a_network_error(engine, workdir):
    block = runtime_block("r", engine, f"http://127.0.0.1:{free_port()}", MODELS[engine])
    with engine_daemon(block) as (home, daemon):
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=180)
        assert (view["state"], view["failure_kind"]) == ("failed", "network_error"), view[
            "execution"
        ]
        assert engine_group_gone(home, view["id"])


def test_missing_binary_is_spawn_failed(engine, workdir):
    block = runtime_block("r", engine, "http://127.0.0.1:9", MODELS[engine]).replace(
        "node_modules/.bin/", "node_modules/.bin/no-such-"
    )
    with engine_daemon(block) as (home, daemon):
        view = run_agent(daemon, "r", "Say hello.", workdir)
        assert (view["state"], view["failure_kind"]) == ("failed", "spawn_failed")


def test_planted_key_appears_nowhere_in_the_home_nor_in_argv(provider, rig, workdir):
    home, daemon = rig
    held = HeldReply(ToolCall("Bash", {"command": "echo no secrets here", "description": "x"}))
    provider.add(held.reply, Text("ok"))
    agent = daemon.call("start", {"task": "Run it.", "workdir": str(workdir), "runtime": "r"})
    argv = engine_argv_while_held(provider, home, held)
    assert argv and b"claude" in argv[0]
    assert not any(PLANTED_KEY.encode() in line for line in argv)
    view = wait_done(daemon, agent["id"])
    assert view["state"] == "succeeded"
    assert files_containing(home.root, PLANTED_KEY) == []
    raw = next(home.agents_dir.rglob("runtime.jsonl")).read_text()
    assert json.loads(raw.splitlines()[0])["type"] == "system"


def test_unified_quota_headers_seen_by_the_broker_become_samples(engine, provider, rig, workdir):
    """The provider's anthropic-ratelimit-unified-* headers, through the credential broker."""
    home, daemon = rig
    reset = int(time.time()) + 7200
    provider.response_headers = {
        "anthropic-ratelimit-unified-5h-utilization": "0.3",
        "anthropic-ratelimit-unified-5h-reset": str(reset),
        "anthropic-ratelimit-unified-7d-utilization": "0.9",
        "anthropic-ratelimit-unified-7d-reset": str(reset + 86400),
    }
    provider.add(Text("done"))
    view = run_agent(daemon, "r", "Say done.", workdir)
    assert view["state"] == "succeeded", view
    shown = {w["window"]: w for w in daemon.call("limits", {"runtime": "r"})["windows"]}
    assert (
        shown["5h"]["remaining_percent"] == pytest.approx(70.0) and shown["5h"]["reset_at"] == reset
    )
    assert shown["7d"]["remaining_percent"] == pytest.approx(10.0) and shown["7d"]["risk"] == "high"
    (route,) = daemon.call("capacity_order", {})["routes"]
    assert route["runtime"] == "r" and route["limiting_window"] == "7d"
