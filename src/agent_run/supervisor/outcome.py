"""The terminal decision, in DESIGN.md's order, as one pure function of recorded evidence."""

import re
from dataclasses import dataclass

from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState
from agent_run.engines.base import Completion, Engine
from agent_run.supervisor.engine_process import Escalation

# A reply that is nothing but an error message is a failure, whatever the engine's flags say.
_ERROR_ONLY = re.compile(r"^\s*\[?\s*API Error\b", re.IGNORECASE)


@dataclass
class StopRequest:
    """Why the engine is being stopped before it finished on its own."""

    reason: str
    failure: FailureKind | None  # None: a cancel
    escalation: Escalation | None = None
    answer_stands: bool = False  # idle after a completed turn: that turn decides the outcome


@dataclass(frozen=True)
class Outcome:
    state: ExecutionState
    failure: FailureKind | None = None
    message: str | None = None
    answer: str | None = None
    verdict: str | None = None


def is_error_only(text: str) -> bool:
    return bool(_ERROR_ONLY.match(text))


def decide_outcome(
    *,
    engine: Engine,
    group_gone: bool,
    stop: StopRequest | None,
    completion: Completion | None,
    exit_code: int | None,
    unparsed_lines: int,
    stderr_tail: str,
    finish: dict[str, str] | None = None,
) -> Outcome:
    """`finish` is the last report of the worker tool of that name: its summary becomes the
    answer and its status the verdict, once the engine itself completed without error."""
    failed = ExecutionState.FAILED
    if not group_gone:
        return Outcome(
            failed,
            FailureKind.ENGINE_GROUP_SURVIVED,
            "engine processes survived SIGKILL of their group",
        )
    if stop is not None and stop.answer_stands and completion is not None:
        stop = None  # ended idle after a completed turn: that turn decides
    if stop is not None and stop.failure is None:
        return Outcome(ExecutionState.CANCELLED, message=stop.reason)
    if stop is not None:
        return Outcome(failed, stop.failure, stop.reason)
    if completion is None:
        last = stderr_tail.strip().splitlines()[-1:] if stderr_tail.strip() else []
        detail = f"; stderr: {last[0][:300]}" if last else ""
        if unparsed_lines:
            return Outcome(
                failed,
                FailureKind.PROTOCOL_ERROR,
                f"engine exited {exit_code} after {unparsed_lines} unparseable line(s){detail}",
            )
        return Outcome(
            failed,
            FailureKind.ENGINE_CRASHED,
            f"engine exited {exit_code} without completing{detail}",
        )
    kind = engine.classify(completion)
    if kind is not None:
        return Outcome(
            failed, kind, completion.text[:500] or completion.subtype, answer=completion.text
        )
    verdict = finish["status"] if finish else None
    text = finish["summary"] if finish else completion.text
    if not text.strip():
        return Outcome(failed, FailureKind.NO_ANSWER, "the engine completed with an empty answer")
    if is_error_only(text):
        return Outcome(failed, FailureKind.ERROR_REPLY, text[:500], answer=text)
    return Outcome(ExecutionState.SUCCEEDED, answer=text, verdict=verdict)
