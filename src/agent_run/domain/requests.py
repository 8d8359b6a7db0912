"""Request models: the parameters of every tool, validated the same way on every transport."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

from agent_run.domain.notices import NotifyTarget
from agent_run.domain.states import ExecutionState, Verdict

# Every integer is bounded to what SQLite (and the JSON of other clients) can hold.
MAX_INT = 2**63 - 1


class _Prose:
    """Marks a text a person writes, at any length (a task, a prompt, a message): the CLI takes
    it inline, from `@FILE` or from stdin (`-`), since a long one cannot pass as an argument
    (the kernel caps one at 128 KiB). Only `cli/spec.py` reads it; the schema is unchanged."""

    def __repr__(self) -> str:
        return "PROSE"


PROSE = _Prose()
Prose = Annotated[str, PROSE]
OptionalProse = Annotated[str | None, PROSE]

AgentId = Field(
    min_length=1,
    max_length=64,
    pattern=r"^ag_[0-9a-z]+$",
    description="the agent's id, as returned by start",
)


HOST_NAME = r"^[a-z0-9][a-z0-9_-]{0,31}$"  # a [hosts.NAME] (host_config.HostName)
# The worker tools an agent may be offered (worker_tools/catalog.WORKER_TOOLS; a test pins them).
WorkerToolName = Literal["finish", "create_commit", "submit_score", "submit_result"]


class Params(BaseModel):
    """Strict on every transport, like config.toml: no `true` for a number, no `"1"` for a
    number, no NaN, no unknown keys. (The CLI converts argv strings before the model.)"""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class StartParams(Params):
    task: Prose = Field(min_length=1, max_length=1_000_000, description="what the agent should do")
    workdir: str = Field(
        min_length=1,
        max_length=4096,
        description="absolute path of an existing directory to work in",
    )
    runtime: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="a configured runtime; default from config",
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="a model of the runtime; default: its default_model",
    )
    account: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_-]{1,32}$",
        description="an account of the runtime; default: its default_account, "
        "else the runtime's own auth",
    )
    route: Literal["auto"] | None = Field(
        default=None,
        description="auto: run on the top route of capacity_order among the runtimes offering "
        "`model` (or the pairs of `model_class`); runtime and account are then chosen, not given",
    )
    model_class: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_-]{1,64}$",
        description="with route auto: a class of config [model_classes] (runtime:model pairs)",
    )
    min_remaining: float | None = Field(
        default=None,
        ge=0,
        lt=100,
        description="with route auto: refuse (NoCapacity) unless the route's limiting window has "
        "more than this % left; default 0 (any route not exhausted)",
    )
    profile: Literal["read_only", "write"] = Field(
        default="write", description="may the agent write files"
    )
    request_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="idempotency key: the same request returns the same agent",
    )
    read_roots: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=list,
        max_length=64,
        description="extra directories the agent may read (absolute paths)",
    )
    stall_seconds: float | None = Field(
        default=None, gt=0, le=86_400, description="fail if the engine is silent this long"
    )
    wall_seconds: float | None = Field(
        default=None, gt=0, le=7 * 86_400, description="fail if one execution runs longer than this"
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="stop the run (failed / budget_exceeded) once the agent's reported input + "
        "output tokens pass this, checked as the usage arrives; a resume counts the earlier "
        "executions",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="stop the run once the agent's cost (the engine's, else priced by "
        "`[prices]`) passes this (no known cost: no effect)",
    )
    notify: NotifyTarget | None = Field(
        default=None,
        description="deliver a notice when the agent ends: {transport: codex_queue, thread_id, "
        "codex_home?} | {transport: command, argv} (notice JSON on stdin) | "
        "{transport: mcp_channel}; see delivery_status",
    )
    host: str | None = Field(
        default=None,
        pattern=HOST_NAME,
        description="a [hosts.NAME] of config: run the agent there, under that host's own "
        "agent-run (its runtimes; workdir and read_roots are paths on the host); default: here",
    )
    worker_tools: list[WorkerToolName] | None = Field(
        default=None,
        max_length=4,
        description="the worker tools offered to the agent (default: finish)",
    )


class AgentParams(Params):
    agent_id: str = AgentId


class DeliveryStatusParams(Params):
    """Exactly one of the three: whose notices (an agent's, a batch's) or which notice."""

    agent_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^ag_[0-9a-z]+$",
        description="an agent started with notify",
    )
    batch_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^bt_[0-9a-z]+$",
        description="a batch started with notify: its notices, one per settle",
    )
    notice_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^nt_[0-9a-z]+$",
        description="one notice, by the notice_id it carries",
    )


class ResumeParams(Params):
    agent_id: str = AgentId
    prompt: Prose = Field(
        min_length=1,
        max_length=1_000_000,
        description="the next instruction, in the same engine session",
    )


class CancelParams(AgentParams):
    pass


class SteerParams(Params):
    agent_id: str = AgentId
    text: Prose = Field(
        min_length=1, max_length=100_000, description="the message to give the running agent"
    )


class ListAgentsParams(Params):
    # An enum is matched by its value even in strict mode (JSON has no enum instances).
    state: list[Annotated[ExecutionState, Strict(False)]] | None = Field(
        default=None, max_length=16, description="only agents in these states"
    )
    runtime: str | None = Field(
        default=None, min_length=1, max_length=200, description="only agents of this runtime"
    )
    standalone: bool | None = Field(
        default=None,
        description="true: only agents started on their own; false: only batch runs' agents "
        "(request_id `<run id>-a<attempt>`)",
    )
    verdict: Annotated[Verdict, Strict(False)] | None = Field(
        default=None, description="only agents whose latest execution said this of itself"
    )
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=MAX_INT)
    after_revision: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="only agents with an event newer than this revision (pass a previous `revision`)",
    )
    wait_seconds: float = Field(
        default=0.0,
        ge=0,
        le=60,
        description="with after_revision: wait up to this long for something newer (long-poll)",
    )


class TranscriptParams(Params):
    agent_id: str = AgentId
    cursor: int = Field(
        default=0, ge=0, le=MAX_INT, description="next_cursor of the previous page; 0 for the start"
    )
    limit: int = Field(default=200, ge=1, le=1000)


class WaitParams(Params):
    agent_id: str = AgentId
    timeout_seconds: float = Field(
        default=30.0, ge=0, le=600, description="return `timed_out: true` after this long"
    )


class DocParams(Params):
    topic: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="a topic; omit for the list of topics",
    )


class EmptyParams(Params):
    pass


class ChangesParams(Params):
    after_revision: int = Field(
        ge=0, description="report what changed after this revision (a previous `revision`)"
    )
    wait_seconds: float = Field(
        default=0.0,
        ge=0,
        le=60,
        description="wait up to this long for a change when there is none yet (long-poll)",
    )
    limit: int = Field(default=500, ge=1, le=5000, description="at most this many ids of each kind")


class EventsParams(Params):
    agent_id: str = AgentId
    after_seq: int = Field(
        default=0,
        ge=0,
        le=MAX_INT,
        description="only events after this seq (pass a previous `next_after`); 0 for the start",
    )
    limit: int = Field(default=200, ge=1, le=1000, description="at most this many events")
    kinds: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None,
        max_length=32,
        description="only events of these kinds (e.g. state, command, tool_report)",
    )


# --- capacity (docs/capacity.md)
class LimitsParams(Params):
    runtime: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="only this runtime; default every enabled one",
    )


# --- end capacity


class PruneParams(Params):
    dry_run: bool = Field(
        default=False, description="only list what would go and the bytes it would free"
    )
