"""Batch tool params and views: the protocol of batches on every transport."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_run.domain.notices import NotifyTarget
from agent_run.domain.pages import CURSOR_PATTERN
from agent_run.domain.requests import MAX_INT, OptionalProse, Params, Prose
from agent_run.domain.run_results import TITLE_CHARS, DiffStats, ReviewNote, RunActivity

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
    title: str | None = Field(
        default=None,
        min_length=1,
        max_length=TITLE_CHARS,
        pattern=r"^[^\x00-\x1f\x7f]*[^\x00-\x20\x7f][^\x00-\x1f\x7f]*$",
        description="what the batch is called in lists (default: the prompt's first line, "
        "trimmed); one line",
    )
    project: str = Field(
        min_length=1,
        max_length=4096,
        description="absolute path of a git repository or a folder inside one",
    )
    prompt: Prose = Field(
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
    route: Literal["auto"] | None = Field(
        default=None,
        description="auto: each run starts on the top route of capacity_order at its admission "
        "(see start)",
    )
    model_class: str | None = Field(
        default=None, pattern=r"^[a-z0-9_-]{1,64}$", description="with route auto (see start)"
    )
    min_remaining: float | None = Field(
        default=None, ge=0, lt=100, description="with route auto (see start)"
    )
    profile: Literal["read_only", "write"] = Field(
        default="write", description="of the workers / candidates"
    )
    host: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$",
        description="a [hosts.NAME]: the runs that own a worktree (workers, candidates) run "
        "there, in worktrees made there at the pinned base; the others (generator, reviewers, "
        "validator) here, on the commits brought back",
    )
    reviewers: int = Field(default=2, ge=1, le=10, description="ranked: reviewers per candidate")
    review_prompt: OptionalProse = Field(
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
    validator_prompt: OptionalProse = Field(
        default=None,
        min_length=1,
        max_length=100_000,
        description="validated: what the validator checks",
    )
    request_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="idempotency key: the same request returns the same batch, and finishes"
        " making one a daemon kill cut",
    )
    stall_seconds: float | None = Field(default=None, gt=0, le=86_400)
    wall_seconds: float | None = Field(default=None, gt=0, le=7 * 86_400)
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="the batch's cap on its runs' reported tokens, running runs included: "
        "each new run gets what is left, running runs stop once the total passes it, and at "
        "it no new run starts",
    )
    max_cost_usd: float | None = Field(
        default=None, gt=0, le=1_000_000, description="the same, on the cost its engines report"
    )
    notify: NotifyTarget | None = Field(
        default=None,
        description="deliver a notice each time the batch settles: blocked (it waits on you), "
        "completed, failed, cancelled; again after a rerun reopened it; the same targets as "
        "start's notify",
    )
    notify_runs: bool = Field(
        default=False, description="with notify: also one notice per run agent that ends"
    )


class BatchParams(Params):
    batch_id: str = BatchId


class ListBatchesParams(Params):
    project: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="only batches whose repository root is this folder (as `project_root`)",
    )
    state: list[BatchState] | None = Field(
        default=None, max_length=6, description="only batches in these states"
    )
    q: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="only batches whose title, prompt or project folder has these words "
        "(each word also as a prefix: `flak test` finds `flaky tests`)",
    )
    include_archived: bool = Field(
        default=False, description="also the batches batch_archive set aside"
    )
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=MAX_INT, description="skip this many (or: cursor)")
    cursor: str | None = Field(
        default=None,
        max_length=100,
        pattern=CURSOR_PATTERN,
        description="next_cursor of the previous page: the page after it, read as an index "
        "range however many batches there are; omit for the first (newest) page",
    )


class RunParams(Params):
    run_id: str = RunId


class BatchArchiveParams(Params):
    batch_id: str = BatchId
    archived: bool = Field(
        default=True, description="false: bring an archived batch back into the default list"
    )


class RunResumeParams(Params):
    run_id: str = RunId
    prompt: Prose = Field(
        default="Continue where you left off and finish the task.", min_length=1, max_length=100_000
    )


class RunFollowupParams(Params):
    run_id: str = RunId
    text: Prose = Field(min_length=1, max_length=100_000, description="the extra instruction")
    reopen: bool = Field(
        default=False, description="unlock a ranked / validated run for follow-ups"
    )


class RunMergeParams(Params):
    run_id: str = RunId
    into: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="the branch to merge into (default: the batch's base branch)",
    )
    strategy: Literal["squash", "merge"] = Field(
        default="squash", description="squash: one commit on top; merge: a merge commit"
    )
    message: OptionalProse = Field(
        default=None, min_length=1, max_length=100_000, description="the commit message"
    )
    dry_run: bool = Field(
        default=False, description="only say whether it would merge cleanly; move nothing"
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


class UsageTotals(View):
    """Tokens and cost reported by executions (running ones: what they reported so far)."""

    executions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = Field(
        default=None,
        description="the engines' reported cost (or the `[prices]` table's); null when none "
        "has one: never invented",
    )
    cost_reported_by: int = Field(default=0, description="how many of the executions have a cost")


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
    started_at: float | None = Field(
        default=None, description="when the run's agent's latest execution started"
    )
    last_message: str | None = Field(
        default=None, description="a running run: its agent's latest message (300 chars)"
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
    merged_sha: str | None = Field(
        default=None, description="the commit `run_merge` made on merged_into"
    )
    merged_into: str | None = None
    account: str | None = Field(
        default=None, description="the account its agent runs on (null: the runtime's own auth)"
    )
    route: str | None = Field(
        default=None,
        description="the route `--route auto` chose for its agent (runtime/account/lane)",
    )
    usage: UsageTotals = Field(
        default_factory=UsageTotals, description="over every execution of every attempt's agent"
    )
    # Its result, measured once when it settled (issue 37); null until then.
    answer_excerpt: str | None = Field(
        default=None, description="the start of its agent's sealed answer, plain text (300 chars)"
    )
    diff: DiffStats | None = Field(
        default=None, description="its change against the pinned base (a run with a worktree)"
    )
    duration_seconds: float | None = Field(
        default=None, description="how long its agents ran, over every attempt (running: so far)"
    )
    activity: RunActivity | None = Field(
        default=None, description="a running run: its agent's latest message or tool call"
    )
    reviews: list[ReviewNote] = Field(
        default_factory=list, description="a ranked candidate: each reviewer's score and reason"
    )
    rank_reason: str | None = Field(
        default=None, description="how its score and rank came about (ranking_rule)"
    )
    can_merge: bool = Field(
        default=False,
        description="a settled run whose branch has commits not merged yet: run_merge has "
        "something to land",
    )


class BatchView(View):
    id: str
    title: str = Field(description="batch_start's title, or its prompt's first line")
    workflow: Workflow
    state: BatchState
    state_reason: str | None = None
    project_root: str
    project_subdir: str
    base_ref: str
    base_sha: str
    base_branch: str | None = Field(
        default=None, description="the branch base_ref named or HEAD was on: run_merge's default"
    )
    worktree_root: str
    config: dict[str, Any]
    counts: dict[str, int]
    usage: UsageTotals = Field(
        default_factory=UsageTotals,
        description="over every execution of the batch's agents, running ones included",
    )
    runs: list[RunView]
    ranking_rule: str | None = Field(
        default=None, description="a ranked batch: how its candidates are ordered, ties included"
    )
    archived_at: float | None = Field(
        default=None, description="when batch_archive set it aside (null: listed)"
    )
    created_at: float
    updated_at: float
    ended_at: float | None = None
    revision: int


class BatchSummary(View):
    id: str
    title: str
    workflow: Workflow
    state: BatchState
    state_reason: str | None = None
    project_root: str
    prompt_excerpt: str = Field(description="the start of its prompt, one line (200 chars)")
    runs: int
    counts: dict[str, int]
    archived_at: float | None = None
    created_at: float
    ended_at: float | None = None


class BatchList(View):
    items: list[BatchSummary] = Field(description="newest first")
    total: int = Field(description="exact number of batches matching the filters")
    limit: int
    offset: int
    next_cursor: str | None = Field(
        default=None, description="pass as `cursor` for the next (older) page; null: no more"
    )
    revision: int


class RunDetail(View):
    batch_id: str
    workflow: Workflow
    batch_state: BatchState
    base_sha: str = Field(description="the batch's pinned base commit")
    run: RunView
    revision: int = Field(description="the global event revision this view was read at")


class RunActionResult(View):
    run: RunView
    message: str


class RunMergeResult(View):
    run_id: str
    merged_into: str
    strategy: Literal["squash", "merge"]
    dry_run: bool
    would_conflict: bool
    conflicts: list[str] = Field(description="paths that conflict; no ref moved")
    ahead: int = Field(description="commits on the run's branch that merged_into lacks")
    behind: int = Field(description="commits on merged_into that the run's branch lacks")
    new_sha: str | None = Field(default=None, description="the commit now at merged_into's tip")
    already_merged_at: str | None = Field(
        default=None,
        description="the run's commits add nothing to merged_into: its tip, recorded as merged_sha",
    )
    followup_text: str | None = Field(
        default=None,
        description="on a conflict: a run_followup text that asks the run's agent to merge"
        " merged_into into its branch and resolve the conflicts; with only uncommitted work: one"
        " that asks the run to commit it",
    )
    followup_reopen: bool = Field(
        default=False,
        description="on a conflict: the run is locked (ranked, validated), so that run_followup"
        " needs reopen=true",
    )
    diff: str = Field(
        default="",
        description="exactly what lands on merged_into: the diff from its tip to the merge",
    )
    diff_truncated: bool = Field(default=False, description="the diff was cut at 200,000 bytes")
    commit_message: str | None = Field(
        default=None,
        description="the message the commit has (or would have): `message`, else the batch's "
        "title and the subjects of the run's own commits",
    )
    commit_subjects: list[str] = Field(
        default_factory=list, description="the subjects of the commits that land, oldest first"
    )
    uncommitted: list[str] = Field(
        default_factory=list,
        description="files changed in the run's worktree but not committed: never merged",
    )
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
    run_id: str | None = Field(
        description="null: a branch named for the batch that no run points at (an admission cut"
        " by a kill in an older agent-run)"
    )
    worktree: str | None = Field(description="null: a branch checked out nowhere")
    branch: str | None
    exists: bool
    dirty_files: list[str]
    unmerged_commits: int
    merged_sha: str | None = Field(
        default=None, description="run_merge merged this branch: its commit on the target"
    )
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
