"""An engine's retries as the supervisor judges them: refused credentials, and when to give up."""

import time
from dataclasses import dataclass

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import RetryEvent
from agent_run.engines.classify import kind_for_http_status, last_status_in

# 401/403 retry events in a row after which the credentials are taken as refused: engines retry
# them (Claude Code nine times), though a refused key does not heal by waiting.
AUTH_REFUSALS_FINAL = 2


@dataclass(frozen=True)
class Verdict:
    """Why the retrying engine is stopped: its failure kind, the reason, the status it rests on."""

    kind: FailureKind
    reason: str
    status: int | None
    status_from_stderr: bool = False  # no retry event carried it: a signal row should


class RetryWatch:
    """One unbroken run of retry events (any other engine event ends it)."""

    def __init__(self, give_up_seconds: float) -> None:
        self.give_up_seconds = give_up_seconds
        self.since: float | None = None  # monotonic start of the run
        self.last: RetryEvent | None = None
        self.auth_refusals = 0  # 401/403 retry events in a row

    def progress(self) -> None:
        self.since = None
        self.auth_refusals = 0

    def retry(self, event: RetryEvent) -> Verdict | None:
        """Note one retry event; a verdict when it makes the failure certain (refused credentials)."""
        self.last = event
        if self.since is None:
            self.since = time.monotonic()
        self.auth_refusals = self.auth_refusals + 1 if event.status in (401, 403) else 0
        if self.auth_refusals < AUTH_REFUSALS_FINAL:
            return None
        return Verdict(
            FailureKind.AUTH_FAILED,
            f"the provider refused the credentials (HTTP "
            f"{event.status}) {self.auth_refusals} times in a row",
            event.status,
        )

    def due(self, now: float) -> bool:
        return self.since is not None and now - self.since > self.give_up_seconds

    def give_up(self, stderr_tail: str) -> Verdict:
        """Classified by the last HTTP status seen: in the retry events or, when they carry none
        (Qwen Code's rate-limit loop), on the engine's stderr."""
        retry = self.last
        status = retry.status if retry else None
        from_stderr = status is None
        if from_stderr:
            status = last_status_in(stderr_tail)
        kind = kind_for_http_status(status, retry.message if retry else "") or (
            FailureKind.NETWORK_ERROR if status is None else FailureKind.PROVIDER_ERROR
        )
        reason = (
            f"the engine only retried for {self.give_up_seconds:g}s (last status: "
            f"{status or 'none'}): {retry.message[:200] if retry else ''}"
        )
        return Verdict(kind, reason, status, from_stderr and status is not None)
