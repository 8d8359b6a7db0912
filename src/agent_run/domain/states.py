"""Execution states and the only transitions allowed between them (DESIGN.md section 4)."""

from enum import StrEnum


class ExecutionState(StrEnum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    # Placed on a host that cannot be reached now: not terminal, never lost on that account;
    # it leaves when the host's own record says what happened (docs/scaling.md) or on `abandon`.
    UNREACHABLE = "unreachable"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {ExecutionState.SUCCEEDED, ExecutionState.FAILED, ExecutionState.CANCELLED, ExecutionState.LOST}
)

_S = ExecutionState
# Any live state may fail (spawn error, crash), be cancelled before the engine ran, or be lost.
# An execution on a host may become unreachable from any live state and, from there, take
# whatever state the host's record proves (or `failed` when the user abandons it).
_U = _S.UNREACHABLE
ALLOWED_TRANSITIONS: dict[ExecutionState, frozenset[ExecutionState]] = {
    _S.CREATED: frozenset({_S.STARTING, _S.FAILED, _S.CANCELLED, _S.LOST, _U}),
    _S.STARTING: frozenset({_S.RUNNING, _S.CANCELLING, _S.FAILED, _S.CANCELLED, _S.LOST, _U}),
    _S.RUNNING: frozenset({_S.CANCELLING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.LOST, _U}),
    _S.CANCELLING: frozenset({_S.CANCELLED, _S.FAILED, _S.LOST, _U}),
    _U: frozenset(
        {_S.STARTING, _S.RUNNING, _S.CANCELLING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.LOST}
    ),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.LOST: frozenset(),
}


def can_transition(old: ExecutionState, new: ExecutionState) -> bool:
    return new in ALLOWED_TRANSITIONS[old]


def check_transition(old: ExecutionState, new: ExecutionState) -> None:
    """Raise ValueError for a transition the lifecycle forbids (terminal states never reopen)."""
    if not can_transition(old, new):
        raise ValueError(f"illegal execution transition {old.value} -> {new.value}")


class Verdict(StrEnum):
    """What the task says of itself through the worker tools; separate from the outcome."""

    DONE = "done"
    BLOCKED = "blocked"
    FAILED = "failed"
