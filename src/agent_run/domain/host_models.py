"""The `hosts` and `abandon` tools' params and results: the configured `[hosts.NAME]`, their
links, and giving up on an agent whose host is unreachable (docs/scaling.md)."""

from typing import Any

from pydantic import Field

from agent_run.domain.requests import MAX_INT, AgentId, Params
from agent_run.domain.states import ExecutionState
from agent_run.domain.views import ExecutionView, View


class HostsParams(Params):
    check: bool = Field(
        default=False,
        description="connect to every host now (version check included) instead of only "
        "reporting the links the daemon has",
    )


class HostView(View):
    name: str
    ssh: str = Field(description="the `ssh` target of its config")
    connected: bool
    version: str | None = Field(description="agent-run's version on the host (its bridge)")
    daemon_pid: int | None = Field(description="the host daemon's pid, on the host")
    remote_home: str | None
    ssh_pid: int | None = Field(description="the local ssh process of the link")
    last_error: str | None
    last_error_code: str | None
    live_agents: int = Field(description="agents placed there that have not ended here")
    unreachable_agents: int


class HostsResult(View):
    items: list[HostView]


class AbandonParams(Params):
    agent_id: str = AgentId


class AbandonResult(View):
    agent_id: str
    abandoned: bool
    state: ExecutionState
    message: str


class MirrorReadParams(Params):
    agent_id: str = AgentId
    after_seq: int = Field(default=0, ge=0, le=MAX_INT, description="the agent_seq copied so far")
    after_message: int = Field(
        default=0, ge=0, le=MAX_INT, description="the message id copied so far"
    )
    limit: int = Field(default=500, ge=1, le=2000, description="at most this many of each")


class MirroredEvent(View):
    agent_seq: int
    kind: str
    data: dict[str, Any]
    ts: float


class MirroredMessage(View):
    id: int
    role: str
    name: str | None
    content: str
    ts: float
    is_error: bool


class MirroredReport(View):
    tool: str
    payload: dict[str, Any]
    ts: float


class MirrorPage(View):
    """One consistent read of a host's agent (one read transaction): what came after the
    cursors, and its latest execution as it is now."""

    agent_id: str
    execution: ExecutionView
    events: list[MirroredEvent]
    messages: list[MirroredMessage]
    reports: list[MirroredReport] | None = Field(
        description="every worker-tool report of the execution, once it has ended; else null"
    )
    revision: int
