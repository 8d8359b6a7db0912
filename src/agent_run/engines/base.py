"""The engine interface: a launch plan, a line protocol, normalized events, a classified outcome."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent_run.domain.failures import FailureKind
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.quota import QuotaEvent


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
class UsageUpdate:
    """The running turn's usage so far (cumulative within the turn, the engine's own keys:
    `input_tokens`, `output_tokens`, ...), as the engine's stream reports it before the turn
    completes; the turn's Completion carries its final usage."""

    usage: dict[str, float]


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


EngineEvent = (
    SessionStarted
    | MessageEvent
    | RetryEvent
    | Completion
    | UsageUpdate
    | ControlAck
    | Unparsed
    | SendInput
    | SteerJoined
    | EngineNote
    | QuotaEvent
)


class Engine(Protocol):
    """One execution's engine object (from its `EngineSpec.factory`); it may keep protocol state."""

    name: str

    def launch(
        self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp, scratch: Path
    ) -> LaunchSpec: ...

    def initial_input(self, plan: ExecutionPlan, prompt: str) -> list[bytes]:
        """What to write to stdin first; `prompt` is the execution's task (or resume prompt)."""
        ...

    def parse_line(self, line: str) -> list[EngineEvent]:
        """Turn one stdout line into events. An engine object lives for one execution, so it
        may keep protocol state (ids, the current turn) between lines."""
        ...

    def steer_input(self, text: str) -> bytes | None:
        """The bytes that deliver a steer; None: this engine cannot take input during a run."""
        ...

    def interrupt_input(self) -> bytes | None:
        """The bytes that interrupt the running turn; None: the supervisor terminates the group."""
        ...

    def classify(self, completion: Completion) -> FailureKind | None: ...
