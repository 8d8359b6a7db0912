"""Parser for the stream-json line protocol of Claude Code (also spoken by Qwen Code and demo)."""

import json
from typing import Any

from agent_run.engines.base import (
    Completion,
    ControlAck,
    EngineEvent,
    MessageEvent,
    RetryEvent,
    SessionStarted,
    Unparsed,
    UsageUpdate,
)
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.quota import QuotaEvent, claude_windows


def user_message(text: str) -> bytes:
    line = {"type": "user", "message": {"role": "user", "content": text}}
    return (json.dumps(line) + "\n").encode()


def control_request(request_id: str, subtype: str) -> bytes:
    line = {"type": "control_request", "request_id": request_id, "request": {"subtype": subtype}}
    return (json.dumps(line) + "\n").encode()


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _tool_result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def load_line(line: str) -> dict[str, Any] | None:
    """One stream-json line as an object, or None when it is not one."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def parse_stream_json_line(line: str) -> list[EngineEvent]:
    obj = load_line(line)
    return [Unparsed(line)] if obj is None else events_of(obj)


def events_of(obj: dict[str, Any]) -> list[EngineEvent]:
    """The normalized events of one parsed stream-json object."""
    kind, subtype = obj.get("type"), obj.get("subtype")
    if kind == "system" and subtype == "init":
        return [SessionStarted(obj.get("session_id"), obj.get("model"))]
    if kind == "system" and subtype == "api_retry":
        return [RetryEvent(obj.get("error_status"), obj.get("attempt"), str(obj.get("error", "")))]
    if kind == "assistant":
        events: list[EngineEvent] = []
        for block in _blocks(obj.get("message") or {}):
            if block.get("type") == "text" and block.get("text"):
                events.append(MessageEvent("assistant", block["text"]))
            elif block.get("type") == "tool_use":
                events.append(
                    MessageEvent(
                        "tool_call", json.dumps(block.get("input", {})), name=block.get("name")
                    )
                )
        return events
    if kind == "user":
        return [
            MessageEvent(
                "tool",
                _tool_result_text(block),
                name=block.get("tool_use_id"),
                is_error=bool(block.get("is_error")),
            )
            for block in _blocks(obj.get("message") or {})
            if block.get("type") == "tool_result"
        ]
    if kind == "result":
        return [
            Completion(
                text=str(obj.get("result") or ""),
                is_error=bool(obj.get("is_error")) or subtype not in (None, "success"),
                error_status=obj.get("api_error_status"),
                subtype=subtype,
                usage=obj.get("usage"),
                cost_usd=obj.get("total_cost_usd"),
            )
        ]
    if kind == "rate_limit_event":  # Claude Code's quota windows (docs/capacity.md)
        windows = claude_windows(obj.get("rate_limit_info"))
        return [QuotaEvent(windows)] if windows else []
    if kind == "control_response":
        response = obj.get("response") or {}
        return [ControlAck(str(response.get("request_id", "")), str(response.get("subtype", "")))]
    return []


def usage_numbers(usage: Any) -> dict[str, float]:
    """The numeric entries of a usage object (nested details and bools left out)."""
    if not isinstance(usage, dict):
        return {}
    return {
        key: value
        for key, value in usage.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


class TurnUsage:
    """A turn's usage so far, from the `usage` of its `assistant` lines (one per model call).
    Claude Code repeats a call's message, with its usage as it stood, on each of its
    content-block lines: the latest line of each message id counts, once."""

    def __init__(self) -> None:
        self._by_message: dict[str, dict[str, float]] = {}

    def observe(self, obj: dict[str, Any]) -> list[EngineEvent]:
        """An UsageUpdate for an assistant line that carries usage, else nothing."""
        message = obj.get("message") if obj.get("type") == "assistant" else None
        usage = usage_numbers(message.get("usage")) if isinstance(message, dict) else {}
        if not usage or not isinstance(message, dict):
            return []
        key = str(message.get("id") or f"line {len(self._by_message)}")
        self._by_message[key] = usage
        total: dict[str, float] = {}
        for counted in self._by_message.values():
            for name, value in counted.items():
                total[name] = total.get(name, 0) + value
        return [UsageUpdate(total)]

    def reset(self) -> None:
        """The turn completed: its result carries the final usage."""
        self._by_message = {}


class StreamJsonProtocol:
    """The stdin/stdout side shared by engines that speak stream-json (Claude Code, demo):
    the task is the first user message, a steer is another (the next turn), and interrupt is
    a control request. The running turn's usage is reported as its assistant lines carry it."""

    _turn: TurnUsage | None = None

    @property
    def turn_usage(self) -> TurnUsage:
        if self._turn is None:
            self._turn = TurnUsage()
        return self._turn

    def initial_input(self, plan: ExecutionPlan, prompt: str) -> list[bytes]:
        return [user_message(prompt)]

    def parse_line(self, line: str) -> list[EngineEvent]:
        obj = load_line(line)
        return [Unparsed(line)] if obj is None else self.events_with_usage(obj)

    def events_with_usage(self, obj: dict[str, Any]) -> list[EngineEvent]:
        """`events_of(obj)`, after an UsageUpdate when the line reports the turn's usage."""
        if obj.get("type") == "result":
            self.turn_usage.reset()
        return self.turn_usage.observe(obj) + events_of(obj)

    def steer_input(self, text: str) -> bytes | None:
        return user_message(text)

    def interrupt_input(self) -> bytes | None:
        return control_request("agent-run-interrupt", "interrupt")
