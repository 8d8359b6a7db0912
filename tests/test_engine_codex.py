"""The real Codex CLI (`codex app-server`) under agent-run, against the mock provider."""

import json
import time
from pathlib import Path

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
from tests.harness import db_rows
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


def events(home, agent_id: str, kind: str) -> list[dict]:
    rows = db_rows(
        home,
        "SELECT data FROM events WHERE agent_id = ? AND kind = ? ORDER BY seq",
        (agent_id, kind),
    )
    return [json.loads(r["data"]) for r in rows]


def codex_config(home) -> Path | None:
    return next(home.root.rglob(".codex/config.toml"), None)


def test_text_answer_with_the_key_sent_only_as_bearer_auth(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("The answer is 42."))
    view = run_agent(daemon, "r", "What is six times seven?", workdir)
    assert view["state"] == "succeeded", view
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "The answer is 42."
    request = provider.main_requests()[0]
    assert request.headers["authorization"] == f"Bearer {PLANTED_KEY}"
    assert [k for k, v in request.headers.items() if PLANTED_KEY in v] == ["authorization"]
    assert PLANTED_KEY not in json.dumps(request.body)
    assert request.body["model"] == MODEL
    assert "six times seven" in request.text()
    assert view["execution"]["usage"]["input_tokens"] > 0, "usage is recorded per execution"
    settings = events(home, view["id"], "thread_settings")[0]
    assert (
        settings["sandbox"] == {"type": "dangerFullAccess"}
        and settings["approvalPolicy"] == "never"
    )
    assert view["execution"]["engine_session_id"], "the thread id is kept for resume"
    assert engine_group_gone(home, view["id"])
    assert codex_config(home) is None, "the config carrying the worker token is deleted"


def test_shell_tool_call_runs_and_its_output_reaches_the_model(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall("exec_command", {"cmd": "echo tool-ran-$((40+2))"}),
        Text("The command printed 42."),
    )
    view = run_agent(daemon, "r", "Run the marker command.", workdir)
    assert view["state"] == "succeeded", view
    results = provider.main_requests()[1].tool_results()
    assert "tool-ran-42" in results[0].output
    items = daemon.call("transcript", {"agent_id": view["id"]})["items"]
    assert any(i["role"] == "tool_call" and i["name"] == "exec_command" for i in items)
    assert any(i["role"] == "tool" and "tool-ran-42" in i["content"] for i in items)
    assert view["execution"]["usage"]["output_tokens"] == 10, (
        "5 per model response, each counted once"
    )


def test_file_written_in_the_workdir_with_apply_patch(provider, rig, workdir):
    home, daemon = rig
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hi there\n*** End Patch\n"
    provider.add(ToolCall("apply_patch", patch), Text("Wrote hello.txt."))
    view = run_agent(daemon, "r", "Write hello.txt.", workdir)
    assert view["state"] == "succeeded", view
    assert (workdir / "hello.txt").read_text() == "hi there\n"


def test_read_only_profile_runs_in_codex_read_only_sandbox(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall("exec_command", {"cmd": "echo hi > made.txt; echo rc=$?"}), Text("Tried.")
    )
    view = run_agent(daemon, "r", "Try to write.", workdir, profile="read_only")
    assert view["state"] == "succeeded", view
    assert not (workdir / "made.txt").exists()
    output = provider.main_requests()[1].tool_results()[0].output
    assert "Read-only file system" in output, output
    assert events(home, view["id"], "thread_settings")[0]["sandbox"]["type"] == "readOnly"


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
    assert "recorded" in provider.main_requests()[1].tool_results()[0].output
    assert files_containing(home.root, PLANTED_KEY) == []


def test_resume_continues_the_thread_with_its_history(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("Remember: the code word is PLUM."))
    first = run_agent(daemon, "r", "Pick a code word.", workdir)
    assert first["state"] == "succeeded"
    thread_id = first["execution"]["engine_session_id"]
    provider.add(Text("The code word was PLUM."))
    daemon.call("resume", {"agent_id": first["id"], "prompt": "What was the code word?"})
    view = wait_done(daemon, first["id"])
    assert view["state"] == "succeeded" and view["execution"]["number"] == 2, view
    assert view["execution"]["engine_session_id"] == thread_id, "thread/resume keeps the thread"
    second_request = provider.main_requests()[-1]
    assert "Pick a code word" in second_request.text(), "resume must send the earlier turns"
    assert "code word is PLUM" in second_request.text()
    assert "What was the code word?" in second_request.text()
    assert engine_group_gone(home, first["id"])


def test_steer_joins_the_running_turn(provider, rig, workdir):
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
    assert engine_group_gone(home, agent["id"])


def test_cancel_mid_turn_interrupts_and_leaves_no_process(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("A very long answer " * 50, seconds=60))
    agent = daemon.call(
        "start", {"task": "Write a long answer.", "workdir": str(workdir), "runtime": "r"}
    )
    assert provider.wait_for(lambda reqs: any(r.role == "main" for r in reqs), timeout=60)
    started = time.monotonic()
    daemon.call("cancel", {"agent_id": agent["id"]})
    view = wait_done(daemon, agent["id"], timeout=60)
    assert view["state"] == "cancelled"
    assert time.monotonic() - started < 15, "turn/interrupt ends the turn without waiting it out"
    # turn/interrupt, then stdin closed: Codex exits 0 by itself, before any TERM.
    assert db_rows(home, "SELECT exit_code FROM executions")[0]["exit_code"] == 0
    assert engine_group_gone(home, agent["id"])


FAULTS = [
    (Fault.http(401, times=None), "auth_failed"),
    (Fault.http(429, times=None), "rate_limited"),
    (Fault.http(500, times=None), "provider_error"),
    (Fault.http(529, times=None), "provider_overloaded"),
    (Fault.malformed(times=None), "stream_error"),
    (Fault.cut(times=None), "stream_error"),
    # Codex ends the turn itself: "idle timeout waiting for SSE" after request_timeout_seconds.
    (Fault.silent_after_headers(times=None), "stream_error"),
]


@pytest.mark.parametrize(("fault", "kind"), FAULTS, ids=[f"{f.kind}-{f.status}" for f, _ in FAULTS])
def test_provider_fault_ends_failed_with_its_kind_and_no_process_left(
    provider, rig, workdir, fault, kind
):
    home, daemon = rig
    provider.add(fault)
    started = time.monotonic()
    view = run_agent(daemon, "r", "Say hello.", workdir, timeout=60)
    assert (view["state"], view["failure_kind"]) == ("failed", kind), view["execution"]
    assert time.monotonic() - started < 30
    assert view["execution"]["answer_sha256"] is None
    assert engine_group_gone(home, view["id"])
    assert files_containing(home.root, PLANTED_KEY) == []


def test_silence_before_headers_is_stalled_by_the_watchdog(provider, workdir):
    # Codex has no timeout before response headers and never ends on its own.
    with engine_daemon(codex_block(provider.url + "/v1", stall_seconds=4.0)) as (home, daemon):
        provider.add(Fault.silent_before_headers(times=None))
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=60)
        assert (view["state"], view["failure_kind"]) == ("failed", "stalled"), view["execution"]
        assert engine_group_gone(home, view["id"])


def test_refused_connection_is_a_network_error_in_bounded_time(workdir):
    # Codex retries a refused connection forever ("Reconnecting... waiting for network"), but
    # it talks to the credential broker, which drops its connection when the provider refuses:
    # Codex then fails the turn ("error sending request") and the broker's evidence makes it
    # a network error.
    block = codex_block(f"http://127.0.0.1:{free_port()}/v1", retry_give_up_seconds=3.0)
    with engine_daemon(block) as (home, daemon):
        started = time.monotonic()
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=60)
        assert (view["state"], view["failure_kind"]) == ("failed", "network_error"), view[
            "execution"
        ]
        assert time.monotonic() - started < 30
        assert "Connection refused" in view["execution"]["failure_message"]
        assert events(home, view["id"], "upstream_unreachable"), "the broker's evidence is kept"
        assert engine_group_gone(home, view["id"])


def test_missing_binary_is_spawn_failed(workdir):
    block = codex_block("http://127.0.0.1:9/v1").replace(
        "node_modules/.bin/", "node_modules/.bin/no-such-"
    )
    with engine_daemon(block) as (home, daemon):
        view = run_agent(daemon, "r", "Say hello.", workdir)
        assert (view["state"], view["failure_kind"]) == ("failed", "spawn_failed")


def test_planted_key_appears_nowhere_in_the_home_nor_argv_nor_the_shell(provider, rig, workdir):
    home, daemon = rig
    held = HeldReply(ToolCall("exec_command", {"cmd": "env"}))
    provider.add(held.reply, Text("ok"))
    agent = daemon.call("start", {"task": "Run it.", "workdir": str(workdir), "runtime": "r"})
    argv = engine_argv_while_held(provider, home, held)
    assert len(argv) >= 2, "the Node wrapper and the native binary share the group"
    assert not any(PLANTED_KEY.encode() in line for line in argv)
    view = wait_done(daemon, agent["id"])
    assert view["state"] == "succeeded", view
    shell_env = provider.main_requests()[-1].tool_results()[-1].output
    assert "PWD=" in shell_env and PLANTED_KEY not in shell_env
    assert files_containing(home.root, PLANTED_KEY) == []
    assert engine_group_gone(home, agent["id"])


def test_quota_headers_become_capacity_samples_shown_by_limits(provider, rig, workdir):
    """Codex turns the provider's x-codex-* headers into `account/rateLimits/updated`: samples."""
    home, daemon = rig
    reset = int(time.time()) + 3 * 3600
    provider.response_headers = {
        "x-codex-primary-used-percent": "25",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(reset),
        "x-codex-secondary-used-percent": "60",
        "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-at": str(reset + 86400),
    }
    provider.add(Text("done"))
    view = run_agent(daemon, "r", "Say done.", workdir)
    assert view["state"] == "succeeded", view
    rows = db_rows(
        home,
        "SELECT window, remaining_percent, reset_at, source, execution_id"
        " FROM capacity_samples WHERE runtime = 'r' ORDER BY id",
    )
    windows = {r["window"]: (r["remaining_percent"], r["reset_at"], r["source"]) for r in rows}
    assert windows["5h"] == (75.0, reset, "native") and windows["7d"] == (
        40.0,
        reset + 86400,
        "native",
    )
    limits = daemon.call("limits", {})
    shown = {(w["runtime"], w["window"]): w for w in limits["windows"]}
    assert shown[("r", "5h")]["remaining_percent"] == 75.0 and shown[("r", "5h")]["known"] is True
    assert shown[("r", "7d")]["risk"] in ("low", "medium")
