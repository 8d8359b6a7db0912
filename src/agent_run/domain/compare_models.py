"""`runs_compare`'s result: 2 to 4 runs of a batch side by side, their answers and, per file any
of them changed, each run's diff of that file against the pinned base (each bounded)."""

from typing import Annotated

from pydantic import Field

from agent_run.domain.batch_models import BatchId, RunView, View
from agent_run.domain.requests import Params

ANSWER_CHARS = 4_000  # of each run's answer
FILE_DIFF_CHARS = 12_000  # of one file's diff in one run
MAX_FILES = 200  # files compared at most


class RunsCompareParams(Params):
    batch_id: str = BatchId
    run_ids: list[Annotated[str, Field(pattern=r"^rn_[0-9a-z]+$", max_length=64)]] = Field(
        min_length=2, max_length=4, description="2 to 4 runs of the batch"
    )


class CompareRun(View):
    run: RunView
    answer: str | None = Field(
        default=None, description="its agent's sealed answer, re-hashed (4,000 chars at most)"
    )
    answer_truncated: bool = False
    answer_note: str | None = Field(
        default=None, description="why there is no answer (not ready, failed its integrity check)"
    )


class FileSide(View):
    """One run's diff of one file."""

    run_id: str
    changed: bool
    added: int = 0
    removed: int = 0
    diff: str = Field(default="", description="the file's diff (12,000 chars at most)")
    truncated: bool = Field(default=False, description="cut here, or past the whole diff's bound")


class CompareFile(View):
    path: str
    sides: list[FileSide] = Field(description="one per run, in the order the runs were given")


class RunsCompare(View):
    batch_id: str
    title: str
    base_sha: str
    ranking_rule: str | None = None
    runs: list[CompareRun]
    files: list[CompareFile] = Field(description="every file a run changed, by path")
    files_truncated: bool = Field(
        default=False, description="more than 200 files: the rest left out"
    )
    revision: int
