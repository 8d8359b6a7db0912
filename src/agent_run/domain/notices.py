"""Completion notices: the `notify` targets a start names, the outbox states, the retry backoff,
and the notice itself, built only from trusted fields (never a task or an answer)."""

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from agent_run.domain.errors import InvalidRequest

NOTICE_MAX_BYTES = 4096
MAX_ATTEMPTS = 8
BACKOFF_CAP_SECONDS = 60.0
COMMAND_TIMEOUT_SECONDS = 30.0


def _no_nul(value: str) -> str:
    """A program's argument, path or binary: a NUL byte cannot reach `exec`, so refuse it here
    rather than fail every send."""
    if "\x00" in value:
        raise ValueError("must not contain a NUL byte")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must be an absolute path")
    return value


ProgramText = Annotated[str, AfterValidator(_no_nul)]


class _Target(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    max_attempts: int = Field(
        default=MAX_ATTEMPTS, ge=1, le=20, description="give up (`failed`) after this many sends"
    )


class CodexQueueTarget(_Target):
    transport: Literal["codex_queue"]
    thread_id: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="the orchestrating Codex session's id (or exact name)",
    )
    codex_home: Annotated[ProgramText, AfterValidator(_absolute)] | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="absolute path of the orchestrator's CODEX_HOME; default Codex's own "
        "(`$HOME/.codex` of the daemon's user: the daemon's own CODEX_HOME is not passed on)",
    )
    binary: ProgramText | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="the orchestrator's codex binary; default `codex` on the daemon's PATH",
    )


class CommandTarget(_Target):
    transport: Literal["command"]
    argv: list[Annotated[ProgramText, Field(min_length=1, max_length=4096)]] = Field(
        min_length=1,
        max_length=64,
        description="a program and its arguments; gets the notice JSON on stdin",
    )
    timeout_seconds: float = Field(
        default=COMMAND_TIMEOUT_SECONDS, gt=0, le=600, description="kill it after this long"
    )


SESSION_PATTERN = r"^ms_[0-9a-z]{1,40}$"


class McpChannelTarget(_Target):
    transport: Literal["mcp_channel"]
    session: str | None = Field(
        default=None,
        pattern=SESSION_PATTERN,
        description="set by `agent-run mcp` to its own session: the one that started the agent",
    )


class ChannelParams(BaseModel):
    """`notice_channel` (socket only): an `agent-run mcp` session's subscription long-poll."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    session: str = Field(pattern=SESSION_PATTERN)
    ack: list[Annotated[str, Field(pattern=r"^nt_[0-9a-z]+$")]] = Field(
        default_factory=list, max_length=500, description="notices pushed since the last poll"
    )
    wait_seconds: float = Field(default=0.0, ge=0, le=30)
    closing: bool = Field(default=False, description="the session ends: expire what it is owed")


class ChannelNotice(BaseModel):
    id: str
    body: dict[str, Any]
    summary: str


class ChannelBatch(BaseModel):
    notices: list[ChannelNotice]


NotifyTarget = Annotated[
    CodexQueueTarget | CommandTarget | McpChannelTarget, Field(discriminator="transport")
]


NOTIFY_TARGET: TypeAdapter[CodexQueueTarget | CommandTarget | McpChannelTarget] = TypeAdapter(
    NotifyTarget
)


def check_target(target: object) -> None:
    """What the target's model cannot say alone: an `mcp_channel` needs the session that
    `agent-run mcp` fills in (the CLI and the socket have none)."""
    if isinstance(target, McpChannelTarget) and target.session is None:
        raise InvalidRequest(
            "transport mcp_channel pushes to the MCP session that starts the agent: "
            "use it from `agent-run mcp`",
            field="notify.mcp_channel.session",
        )


def run_notify(
    batch_config: dict[str, Any],
) -> CodexQueueTarget | CommandTarget | McpChannelTarget | None:
    """A batch run agent's target: the batch's own, when it asked for a notice per run."""
    if batch_config.get("notify") and batch_config.get("notify_runs"):
        return NOTIFY_TARGET.validate_python(batch_config["notify"])
    return None


class NoticeState(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    RETRY_WAIT = "retry_wait"
    FAILED = "failed"
    EXPIRED = "expired"

    @property
    def final(self) -> bool:
        return self in (NoticeState.DELIVERED, NoticeState.FAILED, NoticeState.EXPIRED)


class Classifier(StrEnum):
    """What one delivery attempt came to."""

    SUCCESS = "success"
    EXIT = "exit"  # the program ran and exited non-zero
    TIMEOUT = "timeout"  # killed after its timeout, the notice not all read: sent again
    # It read the whole notice, then outlived its timeout (killed): received, so not sent again
    RECEIVED_TIMEOUT = "received_timeout"
    SPAWN = "spawn"  # could not be started (missing binary, permission): errno says why
    AMBIGUOUS = "ambiguous"  # the daemon died while sending: it may or may not have arrived
    ERROR = "error"  # agent-run itself failed during the send (`error` says what was raised)


def backoff_seconds(attempt: int) -> float:
    """The wait before retrying after the `attempt`-th failure: min(60 s, 2 s * 2^(n-1))."""
    return float(min(BACKOFF_CAP_SECONDS, 2.0 * 2.0 ** (max(1, attempt) - 1)))


def escape_controls(text: str, keep: str = "") -> str:
    """Control characters (C0, DEL, C1) as visible `\\uXXXX`, so a notice never drives a terminal;
    those in `keep` (a tail's newlines and tabs) stay as they are."""
    return "".join(
        f"\\u{ord(c):04x}" if (ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0) and c not in keep else c
        for c in text
    )


def _field(value: object, limit: int = 200) -> object:
    if isinstance(value, str):
        return escape_controls(value)[:limit]
    return value


def build_notice(notice_id: str, facts: dict[str, object]) -> str:
    """The notice JSON (<= 4 KiB): its id and the trusted facts given, each escaped and bounded.

    `facts` come from the store's own columns (ids, states, failure kind, runtime, model,
    answer sha256, counts), never from an engine's text."""
    body: dict[str, object] = {"notice_id": notice_id, "kind": "agent_run.notice"}
    body |= {key: _field(value) for key, value in facts.items()}
    text = json.dumps(body, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > NOTICE_MAX_BYTES:  # bounded fields make this unreachable; be safe
        keep = {
            k: body[k] for k in ("notice_id", "kind", "agent_id", "batch_id", "state") if k in body
        }
        text = json.dumps(keep | {"truncated": True}, ensure_ascii=True, sort_keys=True)
    return text


def summary_line(body: dict[str, object]) -> str:
    """One line for a human or an agent reading the notice (the codex queue message)."""
    subject = body.get("agent_id") or body.get("batch_id")
    parts = [f"agent-run notice {body.get('notice_id')}: {subject} {body.get('state')}"]
    for key in ("failure_kind", "runtime", "model", "answer_sha256"):
        if body.get(key):
            parts.append(f"{key}={body[key]}")
    return escape_controls(" ".join(parts))[:NOTICE_MAX_BYTES]
