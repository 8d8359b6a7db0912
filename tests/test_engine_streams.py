"""Offline parser tests: real engine stdout, recorded from the pinned CLIs against the mock
provider (tests/support/record_streams.py), parsed by each engine's adapter into normalized events.
No engine runs here; a parser change that drops or misreads a real line fails in the fast loop."""

import json
from pathlib import Path

import pytest

from agent_run.engines.base import (
    Completion,
    ControlAck,
    EngineNote,
    MessageEvent,
    SendInput,
    SessionStarted,
    Unparsed,
    UsageUpdate,
)
from agent_run.engines.plan import ExecutionPlan, load_plan
from agent_run.engines.qwen import QwenEngine
from agent_run.engines.registry import BUILTIN_ENGINES, engine_for


def _plan(engine_name: str, model: str) -> ExecutionPlan:
    data = {
        **PLAN,
        "engine": engine_name,
        "model": model,
        "runtime_config": {"engine": engine_name},
    }
    return load_plan(json.dumps(data))


STREAMS = Path(__file__).parent / "fixtures" / "streams"
PLAN = {
    "agent_id": "ag_x",
    "execution_id": "ex_x",
    "runtime": "r",
    "engine": "?",
    "model": "?",
    "workdir": "/tmp/w",
    "profile": "write",
    "plan_version": 2,
    "runtime_config": None,  # set per engine: {"engine": NAME}
    "stall_seconds": 60.0,
    "wall_seconds": None,
    "cancel_grace_seconds": 1.0,
    "storage_buffer_bytes": 4194304,
    "storage_wait_seconds": 600.0,
    "engine_home": "/tmp/h",
    "read_roots": [],
    "worker_tools": ["finish"],
}


MODELS = {
    "claude": "claude-sonnet-4-5",
    "glm": "glm-4.6",
    "codex": "gpt-5.5",
    "qwen": "qwen3-coder-plus",
}
# (engine, recording) -> the session id the engine reported in that recording
SESSIONS = {
    ("claude", "tool_then_text"): "0d7ddeb1-fbd8-46a9-a5da-ad0508fa00a5",
    ("claude", "auth_failed"): "e658ac8e-cdc7-4bbf-befc-f6a886c3dc0c",
    ("claude", "rate_limited"): "982d7389-32b4-4259-b196-64b80e3683f0",
    ("glm", "tool_then_text"): "9f50b100-8779-46b7-9bf1-715bfc32e396",
    ("glm", "auth_failed"): "1f8e425c-3555-403f-adc1-f52d6ed8910b",
    ("glm", "rate_limited"): "07e0c381-d5c5-4d03-a8cf-495cfb7757ff",
    ("codex", "tool_then_text"): "01a22fd9-8452-7f80-818f-6757dd38d3f7",
    ("codex", "auth_failed"): "01a2307a-2dc8-7bc1-a2ca-a2a4bdbba7d4",
    ("codex", "rate_limited"): "01a2307a-5299-7242-82b2-64f5ba656556",
    ("qwen", "tool_then_text"): "7b762182-79db-4820-b17e-a0746fcb2d66",
    ("qwen", "auth_failed"): "e01b4b8d-3ff4-43aa-8342-16128f5377f1",
    ("qwen", "rate_limited"): "a70c62af-d064-4638-a16c-2a8d1bd44fdb",
}
RECORDINGS = sorted(SESSIONS)
# The shell tool's name and what the engine reports as its output, for `echo tool-ran`.
SHELL = {
    "claude": ("Bash", "tool-ran"),
    "glm": ("Bash", "tool-ran"),
    "codex": ("exec_command", "tool-ran\n\n[exit 0]"),
    "qwen": ("run_shell_command", "tool-ran"),
}
# recording -> (is_error, failure kind, HTTP status in the error text)
OUTCOMES = {
    "tool_then_text": (False, None, None),
    "auth_failed": (True, "auth_failed", "401"),
    "rate_limited": (True, "rate_limited", "429"),
}


def parse(engine_name: str, recording: str, drop_last: bool = False) -> tuple[object, list]:
    """The engine object (it keeps protocol state) and the events of a recorded stream."""
    engine = engine_for(engine_name)
    engine.initial_input(_plan(engine_name, MODELS[engine_name]), "Run the marker command.")
    lines = (STREAMS / engine_name / f"{recording}.jsonl").read_text().splitlines()
    if drop_last:
        lines = lines[:-1]
    return engine, [event for line in lines for event in engine.parse_line(line)]


def parsed(engine_name: str, model: str) -> list:
    return parse(engine_name, "tool_then_text")[1]


def messages(events: list) -> list[tuple[str, str | None, str]]:
    return [
        (e.role, e.name if e.role == "tool_call" else None, e.content)
        for e in events
        if isinstance(e, MessageEvent)
    ]


def test_every_engine_and_recording_is_covered():
    recorded = {(p.parent.name, p.stem) for p in STREAMS.glob("*/*.jsonl")}
    assert recorded == set(SESSIONS)
    assert {engine for engine, _ in recorded} == set(BUILTIN_ENGINES) - {"demo"}, "real CLIs"


@pytest.mark.parametrize(("engine_name", "recording"), RECORDINGS, ids="-".join)
def test_recorded_stream_parses_to_one_session_and_one_classified_completion(
    engine_name, recording
):
    engine, events = parse(engine_name, recording)
    assert not [e for e in events if isinstance(e, Unparsed)]
    sessions = [e for e in events if isinstance(e, SessionStarted)]
    assert [(s.session_id, s.model) for s in sessions] == [
        (SESSIONS[engine_name, recording], MODELS[engine_name])
    ]
    completions = [e for e in events if isinstance(e, Completion)]
    assert len(completions) == 1 and events[-1] is completions[0], events[-3:]
    done = completions[0]
    is_error, kind, status = OUTCOMES[recording]
    assert done.is_error is is_error, done
    assert engine.classify(done) == kind  # type: ignore[attr-defined]
    if status:
        assert status in done.text, done.text


@pytest.mark.parametrize("engine_name", sorted(MODELS))
def test_tool_then_text_gives_the_call_its_output_the_answer_and_the_turns_usage(engine_name):
    _, events = parse(engine_name, "tool_then_text")
    tool, output = SHELL[engine_name]
    (call, result, answer) = messages(events)
    assert call[:2] == ("tool_call", tool) and "echo tool-ran" in call[2], call
    assert result == ("tool", None, output)
    assert answer == ("assistant", None, "The command printed tool-ran.")
    done = events[-1]
    assert isinstance(done, Completion) and done.text == "The command printed tool-ran."
    assert done.usage and done.usage["output_tokens"] == 10, "5 per model response, once each"


@pytest.mark.parametrize(("engine_name", "recording"), RECORDINGS, ids="-".join)
def test_a_truncated_recording_never_completes(engine_name, recording):
    _, events = parse(engine_name, recording, drop_last=True)
    assert not [e for e in events if isinstance(e, Completion)]


def test_claude_stream_json_tool_then_text():
    events = parsed("claude", "claude-sonnet-4-5")
    assert isinstance(events[0], SessionStarted)
    assert messages(events)[0] == (
        "tool_call",
        "Bash",
        json.dumps({"command": "echo tool-ran", "description": "x"}),
    )
    done = events[-1]
    assert isinstance(done, Completion) and (done.is_error, done.subtype) == (False, "success")
    assert done.cost_usd is not None


def test_claude_failed_turn_carries_the_http_status():
    for recording, status in [("auth_failed", 401), ("rate_limited", 429)]:
        for engine_name in ("claude", "glm"):
            done = parse(engine_name, recording)[1][-1]
            assert isinstance(done, Completion) and done.error_status == status


def test_qwen_answers_initialize_first_and_sums_its_turn_usage():
    _, events = parse("qwen", "tool_then_text")
    assert events[0] == ControlAck("agent-run-init", "success")
    lines = [json.loads(x) for x in (STREAMS / "qwen" / "tool_then_text.jsonl").open()]
    per_call = [x["message"]["usage"] for x in lines if x["type"] == "assistant"]
    assert len(per_call) == 2
    done = events[-1]
    assert isinstance(done, Completion) and done.usage == {
        key: sum(u.get(key, 0) for u in per_call) for key in per_call[0]
    }, done.usage
    failed = parse("qwen", "auth_failed")[1][-1]
    assert isinstance(failed, Completion) and failed.subtype == "error_during_execution"


def test_codex_app_server_tool_then_text():
    events = parsed("codex", "gpt-5.5")
    assert not [e for e in events if isinstance(e, Unparsed)]
    kinds = [type(e).__name__ for e in events if not isinstance(e, EngineNote)]
    assert kinds == [
        "SendInput",
        "SessionStarted",
        "SendInput",
        "MessageEvent",
        "MessageEvent",
        "UsageUpdate",  # the tool call's model call
        "MessageEvent",
        "UsageUpdate",  # the answer's
        "Completion",
    ]
    sent = [
        json.loads(line)["method"]
        for e in events
        if isinstance(e, SendInput)
        for line in e.data.decode().splitlines()
    ]
    assert sent == ["initialized", "thread/start", "turn/start"]
    started = next(e for e in events if isinstance(e, SessionStarted))
    assert started.session_id == "01a22fd9-8452-7f80-818f-6757dd38d3f7"
    calls = messages(events)
    assert calls[0][:2] == ("tool_call", "exec_command") and "echo tool-ran" in calls[0][2]
    assert calls[1] == ("tool", None, "tool-ran\n\n[exit 0]")
    assert calls[2] == ("assistant", None, "The command printed tool-ran.")
    done = events[-1]
    assert isinstance(done, Completion) and (done.text, done.is_error, done.subtype) == (
        "The command printed tool-ran.",
        False,
        "completed",
    )
    assert done.usage and done.usage["input_tokens"] == 20310
    warnings = [
        e.data["method"] for e in events if isinstance(e, EngineNote) and e.kind == "engine_warning"
    ]
    assert warnings == ["configWarning"]


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
def test_qwen_classification_of_old_and_new_result_shapes(text, is_error, kind):
    completion = Completion(
        text=text, is_error=is_error, subtype="error_during_execution" if is_error else "success"
    )
    assert QwenEngine().classify(completion) == kind


def test_codex_reports_the_turns_usage_as_it_arrives_and_never_twice() -> None:
    engine, events = parse("codex", "tool_then_text")
    updates = [e.usage for e in events if isinstance(e, UsageUpdate)]
    # thread totals 10103 then 20320 over a thread that started at 0: one call, then two
    assert [(u["input_tokens"], u["output_tokens"]) for u in updates] == [(10098, 5), (20310, 10)]
    done = events[-1]
    assert isinstance(done, Completion) and done.usage == updates[-1]
    # Codex re-sends the same counts (with new rate limits): the same totals, not twice
    lines = (STREAMS / "codex" / "tool_then_text.jsonl").read_text().splitlines()
    repeat = next(line for line in lines if "thread/tokenUsage/updated" in line)
    again = codex_turn_events(repeat, repeat)
    assert [e.usage["input_tokens"] for e in again if isinstance(e, UsageUpdate)] == [10098, 10098]


def codex_turn_events(*lines: str) -> list:
    engine = engine_for("codex")
    engine.initial_input(_plan("codex", "gpt-5.5"), "x")
    started = json.dumps({"method": "turn/started", "params": {"turn": {"id": "t"}}})
    return [event for line in (started, *lines) for event in engine.parse_line(line)]


def test_a_resumed_codex_thread_counts_only_the_new_turn() -> None:
    # a resumed thread's totals start at what the earlier turns spent (1000 in, 50 out)
    update = {
        "method": "thread/tokenUsage/updated",
        "params": {
            "tokenUsage": {
                "total": {"inputTokens": 1100, "outputTokens": 60},
                "last": {"inputTokens": 100, "outputTokens": 10},
            }
        },
    }
    (first,) = [e for e in codex_turn_events(json.dumps(update)) if isinstance(e, UsageUpdate)]
    assert first.usage == {"input_tokens": 100, "output_tokens": 10}


@pytest.mark.parametrize("engine_name", ["claude", "glm", "qwen"])
def test_stream_json_engines_report_the_turns_usage_per_model_call(engine_name) -> None:
    """Each assistant line carries its model call's usage (Claude Code repeats a call's
    message, usage as it stood, on each content-block line: the latest per message id counts)."""
    _, events = parse(engine_name, "tool_then_text")
    lines = [json.loads(x) for x in (STREAMS / engine_name / "tool_then_text.jsonl").open()]
    latest = {
        x["message"]["id"]: x["message"]["usage"]
        for x in lines
        if x["type"] == "assistant" and x["message"].get("usage")
    }
    updates = [e.usage for e in events if isinstance(e, UsageUpdate)]
    assert updates, "usage reported before the turn's result"
    assert updates[-1]["input_tokens"] == sum(u["input_tokens"] for u in latest.values())
    assert len(latest) == 2  # two model calls: the tool call, then the text


def test_a_repeated_claude_message_line_is_counted_once() -> None:
    line = json.dumps(
        {
            "type": "assistant",
            "message": {"id": "msg_1", "usage": {"input_tokens": 100, "output_tokens": 1}},
        }
    )
    later = line.replace('"output_tokens": 1', '"output_tokens": 40')
    engine = engine_for("claude")
    engine.initial_input(_plan("claude", "claude-sonnet-4-5"), "x")
    updates = [
        e.usage
        for raw in (line, line, later)
        for e in engine.parse_line(raw)
        if isinstance(e, UsageUpdate)
    ]
    assert updates[-1] == {"input_tokens": 100, "output_tokens": 40}
