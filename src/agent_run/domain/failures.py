"""The closed enum of failure kinds. Callers match on the kind, never on text."""

from enum import StrEnum


class FailureKind(StrEnum):
    SPAWN_FAILED = "spawn_failed"
    AUTH_FAILED = "auth_failed"
    RATE_LIMITED = "rate_limited"
    QUOTA_EXHAUSTED = "quota_exhausted"
    PROVIDER_ERROR = "provider_error"
    PROVIDER_OVERLOADED = "provider_overloaded"
    STREAM_ERROR = "stream_error"
    NETWORK_ERROR = "network_error"
    STALLED = "stalled"
    STARVED = "starved"
    TIMED_OUT = "timed_out"
    ENGINE_CRASHED = "engine_crashed"
    NO_ANSWER = "no_answer"
    ERROR_REPLY = "error_reply"
    PROTOCOL_ERROR = "protocol_error"
    CONFIG_ERROR = "config_error"
    ENGINE_GROUP_SURVIVED = "engine_group_survived"
    SUPERVISOR_FAILED = "supervisor_failed"
    SUPERVISOR_LOST = "supervisor_lost"
    STORAGE_FULL = "storage_full"
    BUDGET_EXCEEDED = "budget_exceeded"
    ABANDONED = "abandoned"

    @property
    def advice(self) -> str:
        return FAILURE_ADVICE[self]

    def advice_for(self, host: str | None) -> str:
        """The advice for an agent on this machine, or on `host` (which cannot be resumed)."""
        return HOST_ADVICE.get(self, self.advice) if host is not None else self.advice


FAILURE_ADVICE: dict[FailureKind, str] = {
    FailureKind.SPAWN_FAILED: "The engine binary could not be started by the daemon (its PATH, not your "
    "shell's): set the runtime's `binary` to an absolute path or restart the daemon "
    "from a shell that has it (`agent-run api restart`); `agent-run doctor` checks "
    "it on the daemon's side.",
    FailureKind.AUTH_FAILED: "The provider refused the credentials, or the engine's sign-in is missing: check the "
    'variable or file named in the runtime\'s auth; for `login = "native"` run '
    "`agent-run login RUNTIME`.",
    FailureKind.RATE_LIMITED: "The provider rate-limited this route: retry later or route to another runtime.",
    FailureKind.QUOTA_EXHAUSTED: "The account's quota is used up: switch runtime or wait for the quota to reset.",
    FailureKind.PROVIDER_ERROR: "The provider returned a server error: retry; if it persists, check the "
    "provider's status.",
    FailureKind.PROVIDER_OVERLOADED: "The provider is overloaded (529 / high demand): retry later.",
    FailureKind.STREAM_ERROR: "The model stream was malformed or cut short: retry the agent.",
    FailureKind.NETWORK_ERROR: "The provider could not be reached: check base_url and the network.",
    FailureKind.STALLED: "The engine produced no event for stall_seconds (time it spent waiting "
    "for a CPU not counted): inspect the transcript, then retry.",
    FailureKind.STARVED: "The engine had work to do but the machine gave it no CPU: its processes "
    "waited to run for three stall_seconds of one silence. Run fewer agents at once, free the "
    "CPU or lower `[supervisor] nice`, then resume the agent.",
    FailureKind.TIMED_OUT: "The execution exceeded its wall budget: raise wall_seconds or split the task.",
    FailureKind.ENGINE_CRASHED: "The engine exited without completing: read the engine log under agents/<id>/.",
    FailureKind.NO_ANSWER: "The engine completed but gave no answer text: rephrase the task to ask for a final answer.",
    FailureKind.ERROR_REPLY: "The engine's only reply was an error message: read the answer text for the cause.",
    FailureKind.PROTOCOL_ERROR: "The engine spoke something agent-run could not parse: check the engine version.",
    FailureKind.CONFIG_ERROR: "The runtime's configuration or credential is unusable (the message names "
    "it): fix that field or file, or export the auth variable and `agent-run api "
    "restart`; `agent-run doctor` runs the checks in the daemon.",
    FailureKind.ENGINE_GROUP_SURVIVED: "Engine processes survived the end of the run and were killed: the result "
    "is not trusted.",
    FailureKind.SUPERVISOR_FAILED: "The supervisor hit an internal error: read the supervisor log under agents/<id>/.",
    FailureKind.SUPERVISOR_LOST: "The supervisor died (killed or machine rebooted): resume or start the agent again.",
    FailureKind.STORAGE_FULL: "The disk holding the home stayed full longer than the supervisor could hold the "
    "run's events in memory: free space (df on the home), then resume or start the "
    "agent again.",
    FailureKind.ABANDONED: "You gave up on it while its host was unreachable: nothing proved it "
    "ended, so it may still be running there (`agent-run agents` on the host, with the host's "
    "own home, lists it); start it again here if you need its result.",
    FailureKind.BUDGET_EXCEEDED: "The run's reported usage passed its max_tokens or max_cost_usd: raise the cap "
    "or split the task (see `agent-run usage`).",
}

# An agent on a host cannot be resumed (`resume` refuses it: NotResumable), so its advice never
# says to.
HOST_ADVICE: dict[FailureKind, str] = {
    FailureKind.SUPERVISOR_LOST: "The supervisor on the host died (killed, or the host rebooted): "
    "start the agent again (an agent on a host cannot be resumed).",
    FailureKind.STORAGE_FULL: "The disk holding the host's agent-run home stayed full longer than "
    "the supervisor could hold the run's events in memory: free space there, then start the "
    "agent again (an agent on a host cannot be resumed).",
}
