"""Failure classification shared by engines: HTTP statuses and tell-tale texts to failure kinds."""

import re

from agent_run.domain.failures import FailureKind

# (pattern, kind) pairs an engine checks its error text against, first match wins.
TextKinds = list[tuple[re.Pattern[str], FailureKind]]


def kind_for_http_status(status: int | None, text: str = "") -> FailureKind | None:
    """Map a provider's HTTP status (and tell-tale text) to a failure kind."""
    lowered = text.lower()
    if status in (401, 403):
        return FailureKind.AUTH_FAILED
    if status == 429:
        return FailureKind.QUOTA_EXHAUSTED if "quota" in lowered else FailureKind.RATE_LIMITED
    if status in (529, 503):
        return FailureKind.PROVIDER_OVERLOADED
    if status is not None and status >= 500:
        return FailureKind.PROVIDER_ERROR
    return None


def kind_from_text(text: str, table: TextKinds) -> FailureKind | None:
    """The kind of the first pattern in `table` that `text` matches."""
    for pattern, kind in table:
        if pattern.search(text):
            return kind
    return None


# An HTTP status as engines print it in error text: "[API Error: 429 ...]", "status code 503".
_STATUS_IN_TEXT = re.compile(r"API Error:?\s*\(?(\d{3})\b|\bstatus(?: code)?:?\s*(\d{3})\b", re.I)


def last_status_in(text: str) -> int | None:
    """The last HTTP status an engine printed in `text` (its stderr), if any."""
    matches = list(_STATUS_IN_TEXT.finditer(text))
    return int(matches[-1].group(1) or matches[-1].group(2)) if matches else None
