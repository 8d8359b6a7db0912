"""Offline parser tests: real engine stdout, recorded from the pinned CLIs against the mock
provider (tests/support/record_streams.py), parsed by each engine's adapter into normalized events.
No engine runs here; a parser change that drops or misreads a real line fails in the fast loop."""

import json
from pathlib import Path

import pytest

from agent_run.engines.base import (
    Completion,
    EngineNote,
    MessageEvent,
    SendInput,
    SessionStarted,
    Unparsed,
)
from agent_run.engines.plan import ExecutionPlan, load_plan
from agent_run.engines.registry import engine_for


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


def parsed(engine_name: str, model: str) -> list:
    engine = engine_for(engine_name)
    engine.initial_input(_plan(engine_name, model), "Run the marker command.")
    lines = (STREAMS / engine_name / "tool_then_text.jsonl").read_text().splitlines()
    return [event for line in lines for event in engine.parse_line(line)]


def messages(events: list) -> list[tuple[str, str | None, str]]:
    return [
        (e.role, e.name if e.role == "tool_call" else None, e.content)
        for e in events
        if isinstance(e, MessageEvent)
    ]


def test_claude_stream_json_tool_then_text():
    events = parsed("claude", "claude-sonnet-4-5")
    assert not [e for e in events if isinstance(e, Unparsed)]
    started = events[0]
    assert (
        isinstance(started, SessionStarted)
        and started.model == "claude-sonnet-4-5"
        and started.session_id
    )
    assert messages(events) == [
        ("tool_call", "Bash", json.dumps({"command": "echo tool-ran", "description": "x"})),
        ("tool", None, "tool-ran"),
        ("assistant", None, "The command printed tool-ran."),
    ]
    done = events[-1]
    assert isinstance(done, Completion) and (done.text, done.is_error, done.subtype) == (
        "The command printed tool-ran.",
        False,
        "success",
    )
    assert done.usage and done.usage["output_tokens"] == 10 and done.cost_usd is not None


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
        "MessageEvent",
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


@pytest.mark.parametrize("engine_name", ["claude", "codex"])
def test_a_truncated_recording_never_completes(engine_name):
    model = {"claude": "claude-sonnet-4-5", "codex": "gpt-5.5"}[engine_name]
    engine = engine_for(engine_name)
    engine.initial_input(_plan(engine_name, model), "Run the marker command.")
    lines = (STREAMS / engine_name / "tool_then_text.jsonl").read_text().splitlines()[:-1]
    events = [event for line in lines for event in engine.parse_line(line)]
    assert not [e for e in events if isinstance(e, Completion)]
