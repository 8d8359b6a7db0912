"""What differs between the real engines in the contract suite: one `EngineCase` per engine.

tests/test_engine_contract.py runs the same scenarios over every case; a difference between
engines is data here (a tool's name, the header that carries the key, the kind a fault ends
with), never an `if engine ==` in a test.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_run.system.home import Home
from tests.harness import db_rows
from tests.support.mock_provider import Fault, RecordedRequest, ToolCall

# A fault the engines share, by id; each case says which kind it ends with (or leaves it to
# its own file when the engine's retries make it a different test).
FAULTS: dict[str, Fault] = {
    "401": Fault.http(401, times=None),
    "429": Fault.http(429, times=None),
    "429-retry-after": Fault.http(429, retry_after=1, times=None),
    "500": Fault.http(500, times=None),
    "503-retry-after": Fault.http(503, retry_after=1, times=None),
    "529": Fault.http(529, times=None),
    "malformed": Fault.malformed(times=None),
    "cut": Fault.cut(times=None),
    "cut-abort": Fault.cut(abort=True, times=None),
    "silent-after-headers": Fault.silent_after_headers(times=None),
}


@dataclass(frozen=True)
class FaultCase:
    kind: str  # the failure kind the execution ends with
    knobs: dict[str, Any] = field(default_factory=dict)  # runtime settings for this fault


@dataclass(frozen=True)
class Quota:
    """Provider response headers that carry quota, and the windows `limits` must then show."""

    headers: Callable[[int], dict[str, str]]  # from a reset time (epoch seconds)
    remaining: dict[str, float]  # window -> remaining percent
    risk_7d: tuple[str, ...]  # the risk `limits` may show for the 7-day window


def _no_check(home: Home, view: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class EngineCase:
    name: str
    model: str
    url_suffix: str  # appended to the mock provider's URL (the API root the CLI expects)
    key_header: str  # the one request header that carries the provider key
    shell: Callable[[str], ToolCall]  # a call of the engine's shell tool running a command
    shell_tool: str
    write_file: Callable[[Path, str], ToolCall]  # a call that writes `content` at `path`
    token_file: str  # glob (under the home) of the file holding the worker token
    binary: str  # the CLI's name, in the engine's command line
    group_processes: int  # at least this many processes in the engine's group while it waits
    first_stdout: Callable[[dict[str, Any]], bool]  # recognizes the engine's first stdout line
    faults: dict[str, FaultCase]  # fault id (FAULTS) -> expected end
    refused_knobs: dict[str, Any] | None  # None: its own file covers a refused connection
    refused_says: str = ""  # text the failure message of a refused connection holds
    # The steered request carries the first, interrupted answer (a queued next turn does;
    # Codex's `turn/steer` restarts the turn's request without it).
    steer_keeps_first_answer: bool = True
    quota: Quota | None = None
    fault_bound_seconds: float | None = None  # the engine ends a fault itself within this
    # Engine-specific checks after the text scenario and after cancel (protocol details).
    check_text: Callable[[Home, dict[str, Any]], None] = _no_check
    check_cancel: Callable[[Home, dict[str, Any]], None] = _no_check

    def __str__(self) -> str:
        return self.name

    def key_of(self, request: RecordedRequest) -> str:
        return request.headers.get(self.key_header, "").removeprefix("Bearer ")


def events(home: Home, agent_id: str, kind: str) -> list[dict[str, Any]]:
    rows = db_rows(
        home,
        "SELECT data FROM events WHERE agent_id = ? AND kind = ? ORDER BY seq",
        (agent_id, kind),
    )
    return [json.loads(r["data"]) for r in rows]


def _interrupt_acknowledged(home: Home, view: dict[str, Any]) -> None:
    acks = {e["request_id"] for e in events(home, view["id"], "control")}
    assert "agent-run-interrupt" in acks, acks


def _codex_thread_settings(home: Home, view: dict[str, Any]) -> None:
    settings = events(home, view["id"], "thread_settings")[0]
    assert settings["sandbox"] == {"type": "dangerFullAccess"}, settings
    assert settings["approvalPolicy"] == "never", settings


def _codex_exits_by_itself(home: Home, view: dict[str, Any]) -> None:
    # turn/interrupt, then stdin closed: Codex exits 0 by itself, before any TERM.
    rows = db_rows(home, "SELECT exit_code FROM executions WHERE agent_id = ?", (view["id"],))
    assert rows[0]["exit_code"] == 0


def _anthropic_shell(command: str) -> ToolCall:
    return ToolCall("Bash", {"command": command, "description": "a command"})


def _anthropic_write(path: Path, content: str) -> ToolCall:
    return ToolCall("Write", {"file_path": str(path), "content": content})


def _unified_headers(reset: int) -> dict[str, str]:
    return {
        "anthropic-ratelimit-unified-5h-utilization": "0.3",
        "anthropic-ratelimit-unified-5h-reset": str(reset),
        "anthropic-ratelimit-unified-7d-utilization": "0.9",
        "anthropic-ratelimit-unified-7d-reset": str(reset + 86400),
    }


def _codex_headers(reset: int) -> dict[str, str]:
    return {
        "x-codex-primary-used-percent": "25",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(reset),
        "x-codex-secondary-used-percent": "60",
        "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-at": str(reset + 86400),
    }


# Claude Code (and GLM through it): every fault ends the turn or stalls it; a silent stream is
# only ended by the watchdog.
_CLAUDE_FAULTS = {
    "401": FaultCase("auth_failed"),
    "429": FaultCase("rate_limited"),
    "500": FaultCase("provider_error"),
    "529": FaultCase("provider_overloaded"),
    "malformed": FaultCase("stream_error"),
    "cut": FaultCase("stream_error"),
    "silent-after-headers": FaultCase("stalled", {"stall_seconds": 20.0}),
}


def _claude_case(name: str, model: str, key_header: str) -> EngineCase:
    return EngineCase(
        name=name,
        model=model,
        url_suffix="",
        key_header=key_header,
        shell=_anthropic_shell,
        shell_tool="Bash",
        write_file=_anthropic_write,
        token_file="mcp.json",
        binary="claude",
        group_processes=1,
        first_stdout=lambda line: line.get("type") == "system",
        faults=_CLAUDE_FAULTS,
        refused_knobs={},
        quota=Quota(_unified_headers, {"5h": 70.0, "7d": 10.0}, ("high",)),
        check_cancel=_interrupt_acknowledged,
    )


CASES = [
    _claude_case("claude", "claude-sonnet-4-5", "x-api-key"),
    _claude_case("glm", "glm-4.6", "authorization"),
    EngineCase(
        name="codex",
        model="gpt-5.5",  # a slug Codex knows, so it advertises its full tool set (apply_patch)
        url_suffix="/v1",
        key_header="authorization",
        shell=lambda command: ToolCall("exec_command", {"cmd": command}),
        shell_tool="exec_command",
        write_file=lambda path, content: ToolCall(
            "apply_patch",
            f"*** Begin Patch\n*** Add File: {path.name}\n+{content.rstrip()}\n*** End Patch\n",
        ),
        token_file=".codex/config.toml",
        binary="codex",
        group_processes=2,  # the Node wrapper and the native binary share the group
        first_stdout=lambda line: line.get("id") == 1,  # the JSON-RPC answer to `initialize`
        faults={
            "401": FaultCase("auth_failed"),
            "429": FaultCase("rate_limited"),
            "500": FaultCase("provider_error"),
            "529": FaultCase("provider_overloaded"),
            "malformed": FaultCase("stream_error"),
            "cut": FaultCase("stream_error"),
            # Codex ends the turn itself: "idle timeout waiting for SSE" after the request
            # timeout (4 s), long before the watchdog's 20 s.
            "silent-after-headers": FaultCase("stream_error"),
        },
        # Codex retries a refused connection forever; the broker's evidence and the retry
        # give-up end it as a network error.
        refused_knobs={"retry_give_up_seconds": 3.0},
        refused_says="Connection refused",
        steer_keeps_first_answer=False,
        quota=Quota(_codex_headers, {"5h": 75.0, "7d": 40.0}, ("low", "medium")),
        fault_bound_seconds=30.0,
        check_text=_codex_thread_settings,
        check_cancel=_codex_exits_by_itself,
    ),
    EngineCase(
        name="qwen",
        model="qwen3-coder-plus",
        url_suffix="/v1",
        key_header="authorization",
        shell=lambda command: ToolCall(
            "run_shell_command", {"command": command, "description": "a command"}
        ),
        shell_tool="run_shell_command",
        write_file=lambda path, content: ToolCall(
            "write_file", {"file_path": str(path), "content": content}
        ),
        token_file="settings.json",
        binary="qwen",
        group_processes=1,
        first_stdout=lambda line: line.get("type") == "control_response",  # to `initialize`
        # Qwen Code retries 429/5xx silently inside the CLI (75-100 s) unless a retry-after
        # comes; 500, 529 and a refused connection are in test_engine_qwen.py. Its stream
        # replays wait up to 8 s between attempts, hence the 20 s stall bound elsewhere.
        faults={
            "401": FaultCase("auth_failed"),
            "429-retry-after": FaultCase("rate_limited"),
            "503-retry-after": FaultCase("provider_overloaded"),
            "malformed": FaultCase("stream_error"),
            "cut": FaultCase("stream_error"),
            "cut-abort": FaultCase("stream_error"),
            "silent-after-headers": FaultCase("stalled", {"stall_seconds": 6.0}),
        },
        refused_knobs=None,
        check_cancel=_interrupt_acknowledged,
    ),
]
BY_NAME = {case.name: case for case in CASES}
