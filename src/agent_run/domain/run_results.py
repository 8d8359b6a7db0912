"""What a batch run produced, as the batch views carry it per run (issue 37): its answer's
excerpt, its change against the pinned base, what a running run is doing now, its reviews; and
the pure rules behind them: a batch's default title, a plain-text excerpt, and how ranked
candidates are ordered (with the reason each rank came about, ties included)."""

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TITLE_CHARS = 200  # a batch's title at most
EXCERPT_CHARS = 300  # an answer's excerpt, a running run's activity text at most


def default_title(prompt: str) -> str:
    """A batch's title when none is given: its prompt's first line, trimmed, at most
    TITLE_CHARS, a control character (a terminal's escape) made a space (migration 0019 gives
    older batches the same, but for that)."""
    first = prompt.strip().split("\n")[0]
    shown = "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in first)
    return shown.strip()[:TITLE_CHARS]


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str | None:
    """`text` as one line of plain text (whitespace runs made one space), at most `limit`
    characters, an ellipsis where it was cut; None for nothing. Escaping is the reader's job."""
    if text is None:
        return None
    flat = " ".join(text.split())
    if not flat:
        return None
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DiffStats(_View):
    """A run's change against its batch's pinned base, measured once when the run settled."""

    files: int = Field(
        description="tracked files changed (committed or not), as batch_review's diff"
    )
    insertions: int
    deletions: int
    commits: int = Field(description="commits on the run's branch ahead of the base")
    uncommitted_files: int = Field(
        description="files changed in the worktree but not committed (untracked ones included): "
        "what a merge leaves behind"
    )
    head: str | None = Field(default=None, description="the branch tip that was measured")

    @property
    def lines_changed(self) -> int:
        return self.insertions + self.deletions


ActivityKind = Literal["message", "tool_call", "tool_result", "user"]


class RunActivity(_View):
    """What a running run's agent is doing now: its latest message or tool call."""

    kind: ActivityKind
    tool: str | None = Field(default=None, description="the tool called (kind tool_call)")
    text: str = Field(description="plain text, at most 300 characters")
    since: float = Field(description="when it was written (unix time)")


class ReviewNote(_View):
    """One reviewer's verdict on a ranked candidate."""

    run_id: str
    title: str
    state: str
    score: float | None = None
    reason: str | None = None


# -- ranking ------------------------------------------------------------------------------------

RANKING_RULE = (
    "a candidate whose verify_command failed ranks after every other; then the mean review "
    "score, highest first (a candidate with no review score after those with one); on an "
    "equal score, fewer lines changed first; then the earlier candidate"
)


@dataclass(frozen=True)
class Candidate:
    """What ranking a candidate reads: its reviews' scores, verify result and change size."""

    run_id: str
    index: int
    scores: tuple[float, ...]
    verify_passed: bool | None
    lines_changed: int | None

    @property
    def score(self) -> float | None:
        return round(sum(self.scores) / len(self.scores), 2) if self.scores else None

    def key(self) -> tuple[bool, bool, float, float, int]:
        return (
            self.verify_passed is False,
            self.score is None,
            -(self.score or 0.0),
            float("inf") if self.lines_changed is None else self.lines_changed,
            self.index,
        )


@dataclass(frozen=True)
class Ranked:
    run_id: str
    score: float | None
    rank: int
    reason: str


def rank_candidates(candidates: list[Candidate]) -> list[Ranked]:
    """Every candidate's rank (1 is best) by RANKING_RULE, each with how it came about."""
    order = sorted(candidates, key=Candidate.key)
    return [
        Ranked(c.run_id, c.score, n, _reason(c, order, n)) for n, c in enumerate(order, start=1)
    ]


def _basis(c: Candidate) -> str:
    if c.score is None:
        return "no review score"
    shown = ", ".join(f"{s:g}" for s in c.scores)
    return f"score {c.score:g} (mean of {len(c.scores)} review(s): {shown})"


def _reason(c: Candidate, order: list[Candidate], rank: int) -> str:
    parts = [_basis(c)]
    if c.verify_passed is not None:
        parts.append("verify passed" if c.verify_passed else "verify FAILED: ranked after the rest")
    if rank > 1:
        parts.append(_decided_by(order[rank - 2], c, "after"))
    if rank < len(order):
        parts.append(_decided_by(order[rank], c, "before"))
    return "; ".join(p for p in parts if p)


def _decided_by(other: Candidate, c: Candidate, side: str) -> str:
    """Which rule put `c` next to its neighbour `other`: said only for a tie on the score
    (the plain score order needs no word)."""
    if other.key()[:3] != c.key()[:3]:
        return ""
    name = f"candidate {other.index}"
    if other.lines_changed != c.lines_changed:
        mine = "?" if c.lines_changed is None else c.lines_changed
        theirs = "?" if other.lines_changed is None else other.lines_changed
        return f"tied with {name} on score, {side} it on lines changed ({mine} vs {theirs})"
    which = "later" if side == "after" else "earlier"
    return f"tied with {name} on score and lines changed, {side} it as the {which} candidate"
