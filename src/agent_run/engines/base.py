"""The engine interface: a launch plan, a line protocol, normalized events, a classified outcome."""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent_run.domain.failures import FailureKind


@dataclass(frozen=True)
class ExecutionPlan:
    """Everything a supervisor needs to run one execution; stored as `executions.plan_json`."""

    agent_id: str
    execution_id: str
    runtime: str
    engine: str
    model: str
    workdir: str
    profile: str
    prompt: str
    runtime_config: dict[str, Any]
    stall_seconds: float
    wall_seconds: float | None
    cancel_grace_seconds: float
    engine_home: str
    resume_session_id: str | None = None
    read_roots: list[str] = field(default_factory=list)
    worker_tools: list[str] = field(default_factory=lambda: ["finish"])
    storage_buffer_bytes: int = 4 * 1024 * 1024  # events held in memory while the disk is full
    storage_wait_seconds: float = 600.0  # how long the end waits for space before giving up

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ExecutionPlan":
        return cls(**data)


@dataclass(frozen=True)
class WorkerMcp:
    """How to start the worker-tools MCP server; each engine renders it in its own config format."""

    name: str
    command: str
    args: list[str]
    env: dict[str, str]
    tools: list[str]


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    stdin_pipe: bool
    # Files holding the worker token, removed when the execution ends.
    token_files: list[Path] = field(default_factory=list)


# Normalized events: what every engine's stream is turned into.
@dataclass(frozen=True)
class SessionStarted:
    session_id: str | None
    model: str | None


@dataclass(frozen=True)
class MessageEvent:
    role: str  # assistant | user | tool
    content: str
    name: str | None = None
    is_error: bool = False  # a tool result the engine marked as failed


@dataclass(frozen=True)
class RetryEvent:
    status: int | None
    attempt: int | None
    message: str


@dataclass(frozen=True)
class Completion:
    """The engine's own end-of-turn record."""

    text: str
    is_error: bool
    error_status: int | None = None
    subtype: str | None = None
    usage: dict[str, Any] | None = None
    cost_usd: float | None = None


@dataclass(frozen=True)
class ControlAck:
    request_id: str
    subtype: str


@dataclass(frozen=True)
class Unparsed:
    line: str


@dataclass(frozen=True)
class SendInput:
    """Bytes the engine's protocol needs written to its stdin now (a reply, the next request)."""

    data: bytes


@dataclass(frozen=True)
class SteerJoined:
    """A message sent during a turn was taken into that turn: it opens no turn of its own."""


@dataclass(frozen=True)
class EngineNote:
    """Something worth an event that is neither a message nor a completion (e.g. a warning)."""

    kind: str
    data: dict[str, Any]


EngineEvent = (SessionStarted | MessageEvent | RetryEvent | Completion | ControlAck | Unparsed
               | SendInput | SteerJoined | EngineNote)


class Engine(Protocol):
    name: str
    supports_steer: bool
    supports_interrupt: bool

    def launch(self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp,
               scratch: Path) -> LaunchSpec: ...

    def initial_input(self, plan: ExecutionPlan) -> list[bytes]: ...

    def parse_line(self, line: str) -> list[EngineEvent]:
        """Turn one stdout line into events. An engine object lives for one execution, so it
        may keep protocol state (ids, the current turn) between lines."""
        ...

    def steer_input(self, text: str) -> bytes | None: ...

    def interrupt_input(self) -> bytes | None: ...

    def classify(self, completion: Completion) -> FailureKind | None: ...


def kind_for_http_status(status: int | None, text: str = "") -> FailureKind | None:
    """Map a provider's HTTP status (and tell-tale text) to a failure kind."""
    lowered = text.lower()
    if status in (401, 403):
        return FailureKind.AUTH_FAILED
    if status == 429:
        return FailureKind.QUOTA_EXHAUSTED if "quota" in lowered else FailureKind.RATE_LIMITED
    if status in (529, 503):
        return FailureKind.PROVIDER_OVERLOADED
    if status is not None and status >= 500:
        return FailureKind.PROVIDER_ERROR
    return None


# An HTTP status as engines print it in error text: "[API Error: 429 ...]", "status code 503".
_STATUS_IN_TEXT = re.compile(r"API Error:?\s*\(?(\d{3})\b|\bstatus(?: code)?:?\s*(\d{3})\b", re.I)


def last_status_in(text: str) -> int | None:
    """The last HTTP status an engine printed in `text` (its stderr), if any."""
    matches = list(_STATUS_IN_TEXT.finditer(text))
    return int(matches[-1].group(1) or matches[-1].group(2)) if matches else None
