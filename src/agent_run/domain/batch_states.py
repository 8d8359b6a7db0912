"""Batch and run states and the only transitions allowed between them; the store enforces
them with compare-and-set updates (`UPDATE ... WHERE state = ?`)."""

from enum import StrEnum


class BatchState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    BLOCKED = "blocked"  # a staged workflow's run failed: rerun, resume or stop it to go on
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self in BATCH_ENDED


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def settled(self) -> bool:
        return self in RUN_SETTLED


# The one set of ended batches: the scheduler no longer advances them. A rerun, resume or
# follow-up of one of its runs reopens a completed or failed batch; a cancelled one stays so.
BATCH_ENDED = frozenset({BatchState.COMPLETED, BatchState.FAILED, BatchState.CANCELLED})
# A batch's notice announces each move into one of these: it ended, or it waits on the user.
BATCH_SETTLED = BATCH_ENDED | {BatchState.BLOCKED}
# Runs that are not queued or running: what a rerun, resume or follow-up starts from.
RUN_SETTLED = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})
RUN_ACTIVE = frozenset({RunState.QUEUED, RunState.RUNNING})
# In a staged workflow (ranked, validated) a failed run blocks the next stage until it is
# rerun, resumed or stopped; a stopped (cancelled) run is set aside: the next stage goes on
# with the runs that remain (the Agents Runner rule).
RUN_BLOCKING = frozenset({RunState.FAILED})
RUN_SET_ASIDE = frozenset({RunState.CANCELLED})

_B = BatchState
BATCH_TRANSITIONS: dict[BatchState, frozenset[BatchState]] = {
    # Every run may be stopped before one started: a queued batch can settle at once.
    _B.QUEUED: frozenset({_B.RUNNING, _B.BLOCKED, _B.COMPLETED, _B.FAILED, _B.CANCELLED}),
    _B.RUNNING: frozenset({_B.BLOCKED, _B.COMPLETED, _B.FAILED, _B.CANCELLED}),
    _B.BLOCKED: frozenset({_B.RUNNING, _B.CANCELLED}),
    _B.COMPLETED: frozenset({_B.RUNNING}),  # reopened by a rerun, resume or follow-up
    _B.FAILED: frozenset({_B.RUNNING}),
    _B.CANCELLED: frozenset(),
}

_R = RunState
RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    _R.QUEUED: frozenset({_R.RUNNING, _R.CANCELLED}),
    _R.RUNNING: frozenset({_R.SUCCEEDED, _R.FAILED, _R.CANCELLED}),
    # A settled run starts its next attempt (rerun, resume, follow-up, a workflow's retry) or
    # waits again when a rerun elsewhere resets it.
    _R.SUCCEEDED: frozenset({_R.RUNNING, _R.QUEUED}),
    # A failed run that blocks a staged batch is stopped (set aside): the batch goes on without it.
    _R.FAILED: frozenset({_R.RUNNING, _R.QUEUED, _R.CANCELLED}),
    _R.CANCELLED: frozenset({_R.RUNNING, _R.QUEUED}),
}


class IllegalTransition(ValueError):
    """A state change the machine forbids: a bug in the caller, never a user error."""


def check_batch_transition(old: BatchState, new: BatchState) -> None:
    """Raise IllegalTransition unless `old -> new` is allowed; staying in a state is no transition."""
    if old != new and new not in BATCH_TRANSITIONS[old]:
        raise IllegalTransition(f"illegal batch transition {old.value} -> {new.value}")


def check_run_transition(old: RunState, new: RunState) -> None:
    """Raise IllegalTransition unless `old -> new` is allowed; staying in a state is no transition."""
    if old != new and new not in RUN_TRANSITIONS[old]:
        raise IllegalTransition(f"illegal run transition {old.value} -> {new.value}")
