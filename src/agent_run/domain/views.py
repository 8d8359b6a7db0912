"""View models: what every tool returns, identical on the socket, over MCP and in the CLI."""

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent_run.domain.capacity_windows import Marker, SetAsideLabel
from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState, Verdict

ANSWER_VERIFIED = (
    "null without a sealed answer; false once a re-hash (answer, the batch judge or "
    "the daemon's scrub) found answer.md not matching its sha256"
)


class View(BaseModel):
    model_config = {"extra": "forbid"}


class ExecutionView(View):
    id: str
    number: int = Field(description="1 for the first run, then one more per resume / follow-up")
    kind: Literal["start", "resume", "followup"]
    account: str | None = Field(
        default=None, description="the runtime account it runs on; null: the runtime's own auth"
    )
    route: str | None = Field(
        default=None,
        description="`runtime/account/lane` chosen by `--route auto` (account `-`: own auth)",
    )
    route_reason: str | None = Field(default=None, description="why `--route auto` chose it")
    state: ExecutionState
    failure_kind: FailureKind | None = None
    failure_advice: str | None = None
    failure_message: str | None = None
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    verdict: Verdict | None = Field(
        default=None, description="what the task said of itself via `finish`"
    )
    engine_session_id: str | None = None
    answer_sha256: str | None = None
    answer_bytes: int | None = None
    answer_verified: bool | None = Field(default=None, description=ANSWER_VERIFIED)
    answer_checked_at: float | None = Field(
        default=None, description="when the sealed answer was last re-hashed"
    )
    usage: dict[str, float] | None = Field(
        default=None,
        description="as the engine reported it; while running, what it reported so far",
    )
    cost_usd: float | None = Field(
        default=None,
        description="as the engine reported it, else priced by `[prices]`; null when neither",
    )
    cost_source: Literal["engine", "price_table"] | None = None
    max_tokens: int | None = Field(default=None, description="its spend cap in tokens, if any")
    max_cost_usd: float | None = Field(default=None, description="its spend cap in USD, if any")


class AgentView(View):
    id: str
    request_id: str | None = None
    runtime: str
    engine: str
    model: str
    account: str | None = Field(default=None, description="the latest execution's account")
    task: str
    workdir: str
    profile: Literal["read_only", "write"]
    created_at: float
    state: ExecutionState = Field(description="the state of the latest execution")
    failure_kind: FailureKind | None = None
    verdict: Verdict | None = Field(
        default=None, description="done / blocked / failed, from the worker tools"
    )
    answer_verified: bool | None = Field(default=None, description=ANSWER_VERIFIED)
    execution: ExecutionView
    event_count: int
    last_message: str | None = Field(
        default=None, description="the last transcript line, truncated"
    )
    revision: int = Field(description="the global event revision this view was read at")
    sandbox: Literal["bubblewrap", "none"] = Field(
        default="bubblewrap",
        description="none: the runtime's engine runs unsandboxed, seeing all the user can",
    )
    host: str | None = Field(
        default=None,
        description="the [hosts.NAME] it runs on (its own agent-run there); null: this machine",
    )


class AgentSummary(View):
    id: str
    request_id: str | None = Field(
        default=None, description="a batch run's agent has `<run id>-a<attempt>`"
    )
    runtime: str
    model: str
    account: str | None = None
    route: str | None = Field(default=None, description="the route `--route auto` chose")
    state: ExecutionState
    failure_kind: FailureKind | None = None
    task_preview: str
    created_at: float
    updated_at: float
    answer_sha256: str | None = None
    answer_verified: bool | None = Field(default=None, description=ANSWER_VERIFIED)
    verdict: Verdict | None = Field(
        default=None, description="done / blocked / failed, from the worker tools"
    )
    sandbox: Literal["bubblewrap", "none"] = Field(
        default="bubblewrap",
        description="none: the runtime's engine runs unsandboxed, seeing all the user can",
    )


class AgentList(View):
    items: list[AgentSummary]
    total: int = Field(description="exact number of agents matching the filters")
    limit: int
    offset: int
    revision: int


class AnswerView(View):
    agent_id: str
    execution_id: str
    text: str
    sha256: str
    bytes: int
    path: str
    verified: Literal[True] = True


class TranscriptItem(View):
    id: int
    execution_number: int
    role: str
    name: str | None = None
    content: str
    ts: float
    is_error: bool = Field(default=False, description="a tool result the engine marked as failed")


class TurnPrompt(View):
    number: int = Field(description="the execution's number: the turn it opens")
    kind: Literal["start", "resume", "followup"]
    prompt: str = Field(
        description="what the execution was started with: the task, a resume's or follow-up's text"
    )
    created_at: float


class TranscriptPage(View):
    agent_id: str
    items: list[TranscriptItem]
    turns: list[TurnPrompt] = Field(
        default_factory=list,
        description="the turns that begin in this page, each with its prompt: those after the "
        "cursor's turn, up to the last item's (every later one when the page reaches the end, "
        "so a turn with no message yet is there too)",
    )
    next_cursor: int = Field(description="pass as `cursor` to read what follows")
    state: ExecutionState
    finished: bool = Field(description="the agent is terminal and every item has been read")


class EventItem(View):
    seq: int = Field(description="the store revision of the event (global order)")
    agent_seq: int = Field(description="the event's number among this agent's events")
    execution_id: str
    kind: str
    data: dict[str, Any]
    ts: float


class EventsPage(View):
    agent_id: str
    items: list[EventItem]
    next_after: int = Field(description="pass as `after_seq` to read what follows")


class WaitResult(View):
    agent: AgentView
    timed_out: bool


class CancelResult(View):
    agent_id: str
    accepted: bool
    state: ExecutionState
    message: str


class SteerResult(View):
    agent_id: str
    command_id: int
    state: Literal["pending", "delivered", "refused"]
    message: str


class DocResult(View):
    topic: str
    text: str
    topics: list[str]


class Pong(View):
    pong: Literal[True] = True
    version: str
    pid: int
    home: str
    parked: int = 0  # long-polls (list_agents, changes) waiting on the revision now
    notice_passes: int = 0  # passes the notice dispatcher has made since the daemon started


class ToolsResult(View):
    tools: list[dict[str, Any]]


class ChangesResult(View):
    after_revision: int
    revision: int = Field(description="the revision read at: pass it as after_revision next time")
    agents: list[str] = Field(
        description="agents with an event after after_revision (batch runs' agents too)"
    )
    batches: list[str] = Field(
        description="batches whose state or runs changed after after_revision"
    )
    truncated: bool = Field(
        default=False, description="more ids changed than `limit`; re-read everything"
    )


# --- capacity (docs/capacity.md)
_MARKER = (
    "what the slack rests on: `projected` (burn known over an hour or more), `warmup` (one "
    "reading), `thin_evidence` (readings less than an hour apart), `no_reset` (no reset time); "
    "null without a fresh reading"
)
_PROJECTED = (
    "remaining - burn x hours to the reset (marker `projected` only): what will be left at "
    "the reset; negative: it runs out before"
)


class LimitWindow(View):
    runtime: str
    account: str | None = Field(default=None, description="null: the runtime's own auth")
    lane: str
    window: str
    known: bool = Field(description="a fresh reading with a value")
    remaining_percent: float | None = None
    reset_at: float | None = None
    observed_at: float
    age_seconds: float
    source: str
    burn_percent_per_hour: float | None = None
    risk: Literal["high", "medium", "low", "unknown"]
    advice: str
    evidence_hours: float = Field(
        default=0.0, description="time between the first and last reading sharing its reset"
    )
    projected_percent: float | None = Field(default=None, description=_PROJECTED)
    slack: float | None = Field(default=None, description="-1..1; null without a fresh reading")
    marker: Marker | None = Field(default=None, description=_MARKER)
    reset_credits: int | None = Field(
        default=None,
        description="rate-limit resets the account can still redeem, as the reading said "
        "(Codex's rateLimitResetCredits.availableCount); null: not said",
    )


class LimitsResult(View):
    observed_at: float = Field(description="now, when the readings were judged")
    windows: list[LimitWindow]


class WindowExplanation(View):
    """Why one window a route spends counts as it does."""

    lane: str
    window: str
    remaining_percent: float | None = None
    reset_at: float | None = None
    burn_percent_per_hour: float | None = None
    evidence_hours: float = Field(
        default=0.0, description="time between the first and last reading sharing its reset"
    )
    projected_percent: float | None = Field(default=None, description=_PROJECTED)
    slack: float | None = Field(default=None, description="-1..1; null without a fresh reading")
    marker: Marker | None = Field(default=None, description=_MARKER)
    label: SetAsideLabel | None = Field(
        default=None, description="why this window cannot take new work; null when it can"
    )


class RouteAlias(View):
    """One (runtime, account) spending the route's credential pool."""

    runtime: str
    account: str | None = Field(default=None, description="the account's label; null: own auth")
    weight: float = Field(description="its own weight (account > lane > runtime multiplier)")


class RankedRouteView(View):
    runtime: str = Field(description="of the alias with the highest weight (see `aliases`)")
    account: str | None = None
    lane: str
    aliases: list[RouteAlias] = Field(
        default_factory=list,
        description="every (runtime, account) spending this credential pool, highest weight "
        "first: one choice, listed once",
    )
    limiting_window: str
    limiting_lane: str = Field(
        default="default",
        description="the lane of the limiting window: the route's own, or the account-wide "
        "`default` it spends as well",
    )
    remaining_percent: float = Field(description="what is left in the limiting window")
    lowest_remaining_percent: float = Field(
        default=0.0,
        description="the least left in any window the route spends (what --min-remaining is "
        "compared with)",
    )
    reset_at: float | None = None
    slack: float
    score: float
    weight: float = Field(description="the pool's: the highest of its aliases', never the sum")
    reset_credits: int = Field(
        default=0, description="rate-limit resets the account can still redeem (0: none said)"
    )
    credit_factor: float = Field(
        default=1.0, description="1 + n / (n + 1) for n >= 1 reset credits, else 1"
    )
    priority: float = Field(description="score x weight x credit_factor")
    windows: list[WindowExplanation] = Field(
        default_factory=list, description="every window the route spends"
    )


class SetAsideRoute(View):
    runtime: str
    account: str | None = None
    lane: str
    label: SetAsideLabel = Field(
        description="why, for scripts: exhausted | conflict | missing_sample | malformed | "
        "expired | stale_sample (docs/capacity.md)"
    )
    reason: str
    aliases: list[RouteAlias] = Field(default_factory=list)
    windows: list[WindowExplanation] = Field(default_factory=list)


class UnusableRuntime(View):
    runtime: str
    reason: str = Field(description="what doctor finds wrong with it (its binary)")


class CapacityOrderResult(View):
    observed_at: float
    routes: list[RankedRouteView] = Field(description="best first; one per credential pool")
    omitted: list[SetAsideRoute] = Field(description="a window reads 0 %")
    deferred: list[SetAsideRoute] = Field(
        description="a pool lacks a fresh reading, or readings conflict"
    )
    unavailable_runtimes: list[str] = Field(description="no reading at all")
    unusable_runtimes: list[UnusableRuntime] = Field(
        default_factory=list,
        description="never ranked nor chosen by --route auto, whatever their readings say",
    )
    insufficient_diversity: bool = Field(
        description="fewer than two independent credential pools can take new work"
    )


class CollectedSource(View):
    runtime: str
    account: str | None = None
    source: str
    windows: int = Field(description="samples written")
    models: int | None = Field(
        default=None, description="models the engine listed (cached as the runtime's roster)"
    )
    error: str | None = Field(default=None, description="why there is no evidence from this source")
    next_attempt_at: float | None = Field(
        default=None, description="backing off after a failure until then"
    )


class CollectResult(View):
    observed_at: float
    sources: list[CollectedSource]


# --- end capacity


# --- notices (issue 16 part 2; docs/api.md "delivery_status")
class DeliveryAttempt(View):
    """The evidence of one delivery attempt (never a session id or argv values; the notice only
    as the receiver printed it)."""

    classifier: Literal[
        "success", "exit", "timeout", "received_timeout", "spawn", "ambiguous", "error"
    ]
    duration_seconds: float
    exit_status: int | None = None
    errno: int | None = None
    error: str | None = None
    stdin_bytes: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_tail: str = Field(default="", description="the last 2 KiB of stdout, redacted")
    stderr_tail: str = Field(default="", description="the last 2 KiB of stderr, redacted")


class NoticeView(View):
    id: str
    transport: str
    state: Literal["pending", "sending", "delivered", "retry_wait", "failed", "expired"]
    attempts: int
    ambiguous_sends: int = Field(description="sends a dead dispatcher left unfinished (retried)")
    next_attempt_at: float | None = None
    last_error: str | None = None
    last_attempt: DeliveryAttempt | None = None
    body: dict[str, Any] = Field(description="the notice as delivered (trusted fields only)")


class DeliveryStatus(View):
    agent_id: str | None = Field(default=None, description="the agent whose notices these are")
    batch_id: str | None = Field(default=None, description="or the batch whose notices these are")
    transport: str | None = Field(default=None, description="null: started without notify")
    state: Literal["pending", "sending", "delivered", "retry_wait", "failed", "expired"] | None = (
        Field(default=None, description="the latest notice's state; null before the first one")
    )
    attempts: int = 0
    last_error: str | None = None
    last_attempt: DeliveryAttempt | None = None
    notices: list[NoticeView] = Field(
        description="oldest first: an agent's, one per execution that ended; a batch's, one per "
        "settle (blocked or ended); with notice_id, that notice alone"
    )
