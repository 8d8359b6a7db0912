"""The real Qwen Code CLI under agent-run, against the mock provider (Chat Completions at /v1).

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


def test_text_answer_with_the_key_sent_only_as_its_auth_header(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("The answer is 42."))
    view = run_agent(daemon, "r", "What is six times seven?", workdir)
    assert view["state"] == "succeeded", view
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "The answer is 42."
    request = provider.main_requests()[0]
    assert request.headers.get("authorization") == f"Bearer {PLANTED_KEY}"
    assert request.body["model"] == MODEL
    assert "six times seven" in request.text()
    usage = view["execution"]["usage"]
    assert usage and usage["output_tokens"] == 5, (
        "usage is this turn's, not the session's running total"
    )
    assert provider.auxiliary_requests() == [], "memory extraction is off"
    assert engine_group_gone(home, view["id"])


def test_shell_tool_call_runs_and_its_output_reaches_the_model(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall(
            "run_shell_command", {"command": "echo tool-ran-$((40+2))", "description": "marker"}
        ),
        Text("The command printed 42."),
    )
    view = run_agent(daemon, "r", "Run the marker command.", workdir)
    assert view["state"] == "succeeded", view
    results = provider.main_requests()[1].tool_results()
    assert "tool-ran-42" in results[0].output
    items = daemon.call("transcript", {"agent_id": view["id"]})["items"]
    assert any(i["role"] == "tool_call" and i["name"] == "run_shell_command" for i in items)


def test_file_written_in_the_workdir(provider, rig, workdir):
    home, daemon = rig
    provider.add(
        ToolCall("write_file", {"file_path": str(workdir / "hello.txt"), "content": "hi there\n"}),
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
    assert "mcp__agent_run_worker__finish" in provider.main_requests()[0].tool_names()
    assert view["verdict"] == "done"
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "Refactored the parser."
    # Qwen Code hands its whole environment (the key included) to MCP servers; the worker
    # server must not have stored it anywhere.
    assert files_containing(home.root, PLANTED_KEY) == []


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
    assert view["state"] == "succeeded", view
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "Read it all."
    request = provider.main_requests()[0]
    assert "read_file" in request.tool_names()
    assert not {"run_shell_command", "write_file", "edit"} & set(request.tool_names())
    assert str(extra) in request.text(), "a read root is one of the workspace directories"


def test_resume_continues_the_session_with_its_history(provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("Remember: the code word is PLUM."))
    first = run_agent(daemon, "r", "Pick a code word.", workdir)
    assert first["state"] == "succeeded"
    provider.add(Text("The code word was PLUM."))
    daemon.call("resume", {"agent_id": first["id"], "prompt": "What was the code word?"})
    view = wait_done(daemon, first["id"])
    assert view["state"] == "succeeded" and view["execution"]["number"] == 2
    assert view["execution"]["usage"]["output_tokens"] == 5, "a resume does not re-count turn one"
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
    assert "Working on the first request" in provider.main_requests()[-1].text()


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
    # The interrupt was acknowledged (Qwen Code needs the `initialize` request first).
    rows = db_rows(
        home, "SELECT data FROM events WHERE agent_id = ? AND kind = 'control'", (agent["id"],)
    )
    assert "agent-run-interrupt" in {json.loads(r["data"])["request_id"] for r in rows}


# Faults Qwen Code gives up on quickly. 429/503 carry a retry-after, which it honours.
FAULTS = [
    (Fault.http(401, times=None), "auth_failed"),
    (Fault.http(429, retry_after=1, times=None), "rate_limited"),
    (Fault.http(503, retry_after=1, times=None), "provider_overloaded"),
    (Fault.malformed(times=None), "stream_error"),
    (Fault.cut(times=None), "stream_error"),
    (Fault.cut(abort=True, times=None), "stream_error"),
    (Fault.silent_after_headers(times=None), "stalled"),
]
FAULT_IDS = ["401", "429", "503", "malformed", "cut", "cut_abort", "silent_after_headers"]


@pytest.mark.parametrize(("fault", "kind"), FAULTS, ids=FAULT_IDS)
def test_provider_fault_ends_failed_with_its_kind_and_no_process_left(
    provider, workdir, fault, kind
):
    # A short stall bound for the silent stream, the one fault that only the watchdog ends. The
    # others keep 20 s: Qwen Code's stream replays wait up to 8 s between attempts.
    stall = 6.0 if kind == "stalled" else 20.0
    with engine_daemon(qwen_runtime("r", provider.url, stall_seconds=stall)) as (home, daemon):
        provider.add(fault)
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=120)
        assert (view["state"], view["failure_kind"]) == ("failed", kind), view["execution"]
        assert view["execution"]["answer_sha256"] is None
        assert engine_group_gone(home, view["id"])
        assert files_containing(home.root, PLANTED_KEY) == []


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


def test_missing_binary_is_spawn_failed(workdir):
    block = qwen_runtime("r", "http://127.0.0.1:9").replace(
        "node_modules/.bin/", "node_modules/.bin/no-such-"
    )
    with engine_daemon(block) as (home, daemon):
        view = run_agent(daemon, "r", "Say hello.", workdir)
        assert (view["state"], view["failure_kind"]) == ("failed", "spawn_failed")


def test_planted_key_appears_nowhere_in_the_home_nor_in_argv(provider, rig, workdir):
    home, daemon = rig
    held = HeldReply(
        ToolCall("run_shell_command", {"command": "echo no secrets here", "description": "x"})
    )
    provider.add(held.reply, Text("ok"))
    agent = daemon.call("start", {"task": "Run it.", "workdir": str(workdir), "runtime": "r"})
    argv = engine_argv_while_held(provider, home, held)
    assert argv and b"qwen" in b" ".join(argv)
    assert not any(PLANTED_KEY.encode() in line for line in argv)
    view = wait_done(daemon, agent["id"])
    assert view["state"] == "succeeded"
    assert files_containing(home.root, PLANTED_KEY) == []
    raw = next(home.agents_dir.rglob("runtime.jsonl")).read_text()
    assert json.loads(raw.splitlines()[0])["type"] == "control_response"
    settings = list(home.root.rglob("settings.json"))
    assert settings == [], "the settings file holding the worker token is removed at the end"


@pytest.mark.parametrize(
    ("text", "is_error", "kind"),
    [
        # 0.24: error_during_execution, is_error true, the text from `error.message`
        ("[API Error: 401 Incorrect API key provided]", True, "auth_failed"),
        (
            "[API Error: 429 slow down]\nPossible quota limitations in place or slow response times "
            "detected. Please wait and try again later.",
            True,
            "rate_limited",
        ),
        (
            "Quota exhausted: your quota will reset at 00:00 UTC\n\nPlease retry after the reset time.",
            True,
            "quota_exhausted",
        ),
        (
            "[API Error: Connection error. (cause: connect ECONNREFUSED 127.0.0.1:9)]",
            True,
            "network_error",
        ),
        ("[API Error: Model stream ended without a finish reason.]", True, "stream_error"),
        # 0.15: exit 0, is_error false, the error only in the result text
        ("[API Error: 500 internal error]", False, "provider_error"),
        ("[API Error: Expected property name or '}' in JSON at position 1]", False, "stream_error"),
        ("[API Error: Request timeout after 4s]", False, "network_error"),
        ("All done, no errors.", False, None),
    ],
)
def test_classification_of_old_and_new_result_shapes(text, is_error, kind):
    from agent_run.engines.base import Completion
    from agent_run.engines.qwen import QwenEngine

    completion = Completion(
        text=text, is_error=is_error, subtype="error_during_execution" if is_error else "success"
    )
    assert QwenEngine().classify(completion) == kind
