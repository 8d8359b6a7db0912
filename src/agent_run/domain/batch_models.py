"""Batch tool params and views: the protocol of batches on every transport."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_run.domain.requests import MAX_INT, Params

Workflow = Literal["repeated", "generated", "ranked", "validated"]
BatchState = Literal["queued", "running", "blocked", "completed", "failed", "cancelled"]
RunState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
Stage = Literal["generator", "worker", "candidate", "reviewer", "validator"]

BatchId = Field(
    min_length=1, max_length=64, pattern=r"^bt_[0-9a-z]+$", description="the batch's id"
)
RunId = Field(min_length=1, max_length=64, pattern=r"^rn_[0-9a-z]+$", description="the run's id")


class BatchStartParams(Params):
    workflow: Workflow = Field(description="repeated | generated | ranked | validated")
    project: str = Field(
        min_length=1,
        max_length=4096,
        description="absolute path of a git repository or a folder inside one",
    )
    prompt: str = Field(
        min_length=1,
        max_length=1_000_000,
        description="the task of each run (generated: the instruction to the generator)",
    )
    runs: int = Field(ge=1, le=50, description="how many runs (generated: how many tasks to make)")
    concurrency: int = Field(default=4, ge=1, le=50, description="at most this many agents at once")
    base_ref: str = Field(
        default="HEAD",
        min_length=1,
        max_length=1000,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="pinned to a commit when the batch is created",
    )
    worktree_root: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="where worktrees go (default: the repository's parent)",
    )
    runtime: str | None = Field(default=None, min_length=1, max_length=200)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    account: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_-]{1,32}$",
        description="the runtime account every run uses (default: its default_account)",
    )
    profile: Literal["read_only", "write"] = Field(
        default="write", description="of the workers / candidates"
    )
    reviewers: int = Field(default=2, ge=1, le=10, description="ranked: reviewers per candidate")
    review_prompt: str | None = Field(
        default=None, min_length=1, max_length=100_000, description="ranked: what reviewers judge"
    )
    verify_command: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^[^\x00]+$",
        max_length=2_000,
        description="ranked: a shell command run in each candidate worktree",
    )
    verify_timeout_seconds: float = Field(default=600, gt=0, le=3_600)
    validator_prompt: str | None = Field(
        default=None,
        min_length=1,
        max_length=100_000,
        description="validated: what the validator checks",
    )
    request_id: str | None = Field(default=None, min_length=1, max_length=200)
    stall_seconds: float | None = Field(default=None, gt=0, le=86_400)
    wall_seconds: float | None = Field(default=None, gt=0, le=7 * 86_400)
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="the batch's cap on its runs' "
        "reported tokens: at it no new run starts; no one agent may pass it",
    )
    max_cost_usd: float | None = Field(
        default=None, gt=0, le=1_000_000, description="the same, on the cost its engines report"
    )


class BatchParams(Params):
    batch_id: str = BatchId


class ListBatchesParams(Params):
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=MAX_INT)


class RunParams(Params):
    run_id: str = RunId


class RunResumeParams(Params):
    run_id: str = RunId
    prompt: str = Field(
        default="Continue where you left off and finish the task.", min_length=1, max_length=100_000
    )


class RunFollowupParams(Params):
    run_id: str = RunId
    text: str = Field(min_length=1, max_length=100_000, description="the extra instruction")
    reopen: bool = Field(
        default=False, description="unlock a ranked / validated run for follow-ups"
    )


class BatchReviewParams(Params):
    batch_id: str = BatchId
    run_id: str | None = Field(default=None, pattern=r"^rn_[0-9a-z]+$", description="only this run")


class BatchCleanParams(Params):
    batch_id: str = BatchId
    confirm: bool = Field(
        default=False, description="remove what the preview lists; without it, only preview"
    )
    force: bool = Field(
        default=False, description="also remove dirty worktrees and unmerged branches"
    )
    run_ids: list[Annotated[str, Field(pattern=r"^rn_[0-9a-z]+$", max_length=64)]] | None = Field(
        default=None, max_length=500, description="only these runs' worktrees"
    )


class FolderParams(Params):
    path: str | None = Field(
        default=None,
        description="an absolute folder under the allowed roots "
        "(`[web] roots`, default $HOME); omit for the roots themselves",
    )


class View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttemptView(View):
    attempt: int
    kind: Literal["start", "rerun", "resume", "followup"]
    agent_id: str


class RunView(View):
    id: str
    stage: Stage
    index: int
    parent_run_id: str | None = None
    title: str
    state: RunState
    failure: str | None = None
    agent_id: str | None = None
    agent_state: str | None = None
    answer_verified: bool | None = Field(
        default=None, description="the run's agent's answer_verified"
    )
    attempt: int
    attempts: list[AttemptView]
    worktree: str | None = None
    branch: str | None = None
    workdir: str
    locked: bool
    score: float | None = None
    rank: int | None = None
    verify_passed: bool | None = None
    verify_output: str | None = None
    result: Any = None


class BatchView(View):
    id: str
    workflow: Workflow
    state: BatchState
    state_reason: str | None = None
    project_root: str
    project_subdir: str
    base_ref: str
    base_sha: str
    worktree_root: str
    config: dict[str, Any]
    counts: dict[str, int]
    runs: list[RunView]
    created_at: float
    updated_at: float
    ended_at: float | None = None
    revision: int


class BatchSummary(View):
    id: str
    workflow: Workflow
    state: BatchState
    project_root: str
    runs: int
    counts: dict[str, int]
    created_at: float


class BatchList(View):
    items: list[BatchSummary]
    total: int
    limit: int
    offset: int
    revision: int


class RunActionResult(View):
    run: RunView
    message: str


class UntrackedPreview(View):
    path: str
    preview: str


class RunReview(View):
    run_id: str
    stage: Stage
    index: int
    title: str
    worktree: str | None
    branch: str | None
    commits: list[str]
    diff: str
    diff_truncated: bool
    untracked: list[UntrackedPreview]


class BatchReview(View):
    batch_id: str
    base_sha: str
    runs: list[RunReview]


class CleanItem(View):
    run_id: str
    worktree: str
    branch: str | None
    exists: bool
    dirty_files: list[str]
    unmerged_commits: int
    action: Literal["remove", "needs_force", "removed", "already_gone", "kept_running"]


class BatchCleanResult(View):
    batch_id: str
    confirmed: bool
    items: list[CleanItem]
    message: str


class ProjectInfo(View):
    path: str = Field(description="the folder, symlinks resolved")
    is_repository: bool
    repository_root: str | None = None
    subdir: str | None = Field(
        default=None, description="the folder relative to the repository root"
    )
    branch: str | None = Field(
        default=None, description="the checked-out branch (None when detached)"
    )
    head: str | None = Field(default=None, description="the commit HEAD points at")
    head_subject: str | None = None


class DirEntry(View):
    name: str
    path: str = Field(description="symlinks resolved")
    is_repository: bool = Field(description="holds a .git entry")


class DirListing(View):
    path: str | None = Field(description="the listed folder; None when listing the roots")
    parent: str | None = Field(description="the folder above, when it is still under a root")
    roots: list[str]
    entries: list[DirEntry]
    truncated: bool = False
