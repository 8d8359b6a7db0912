"""The four workflows as small modules the scheduler asks questions of: which runs exist, when
a run is ready, how it runs (prompt, profile, worker tools, read roots), what makes it a
success (judge, then a post-success check), how often a failed run is retried, which failures
block, what a rerun resets, and how the batch ends. Workflow and stage names are checked here,
not by the database."""

import json
import re
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_run.domain.batch_states import RUN_BLOCKING, RUN_SET_ASIDE, RunState
from agent_run.domain.errors import InvalidRequest
from agent_run.domain.run_results import Candidate, rank_candidates


@dataclass(frozen=True)
class RunSpec:
    """A run the workflow wants to exist."""

    stage: str
    idx: int
    title: str
    prompt: str
    profile: str
    worktree: bool  # True: its own worktree; False: the project folder or its parent's worktree
    parent_run_id: str | None = None
    locked: bool = False


@dataclass(frozen=True)
class RunOutcome:
    """What the workflow makes of a run whose agent succeeded."""

    ok: bool
    failure: str | None = None
    result: Any = None


@dataclass(frozen=True)
class Check:
    """A command run in a succeeded run's folder; its exit status and output are recorded."""

    command: str
    timeout: float


@dataclass
class Evidence:
    """What a settled run left behind: its agent's answer and worker-tool reports, its commits."""

    answer: str | None
    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1, max_length=100_000)


class WorkerVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker: int = Field(ge=1)
    passed: bool = Field(alias="pass")
    reason: str


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workers: list[WorkerVerdict]
    winner: int | None


def parse_json_reply(text: str) -> Any:
    """JSON from an agent's reply: the whole text, or the first ```json fenced block."""
    fenced = re.search(r"```(?:json)?\s*\n(.*?)```", text, re.S)
    return json.loads(fenced.group(1) if fenced else text)


class Workflow:
    name = ""
    staged = False  # only staged workflows can be `blocked`: a failed run stops the rest
    main_stage = "worker"
    stages: tuple[str, ...] = ("worker",)
    options: frozenset[str] = frozenset()  # batch_start fields only this workflow takes

    def refuse_foreign_options(self, given: set[str]) -> None:
        """InvalidRequest naming a given field that only another workflow takes (`reviewers`
        on a repeated batch): it would be ignored silently otherwise."""
        for name in sorted(given & WORKFLOW_OPTIONS - self.options):
            owners = [w.name for w in WORKFLOWS.values() if name in w.options]
            raise InvalidRequest(
                f"{name} applies to {' and '.join(owners)} batches, not {self.name}",
                field=name,
            )

    def initial_runs(self, cfg: dict[str, Any]) -> list[RunSpec]:
        return [
            RunSpec(
                self.main_stage,
                n,
                f"run {n}",
                cfg["prompt"],
                cfg["profile"],
                worktree=True,
                locked=self.staged,
            )
            for n in range(1, cfg["runs"] + 1)
        ]

    def follow_on_runs(self, cfg: dict[str, Any], runs: list[sqlite3.Row]) -> list[RunSpec]:
        return []

    def ready(self, run: sqlite3.Row, runs: list[sqlite3.Row]) -> bool:
        return True

    def worker_tools(self, stage: str) -> list[str]:
        return ["finish"]

    def read_roots(self, run: sqlite3.Row, runs: list[sqlite3.Row]) -> list[str]:
        """Folders the run's agent may read besides its own."""
        return []

    def retries(self, stage: str) -> int:
        """How many times a failed run of `stage` is started again on its own."""
        return 0

    def judge(self, run: sqlite3.Row, evidence: Evidence, cfg: dict[str, Any]) -> RunOutcome:
        return RunOutcome(True)

    def post_success_check(self, run: sqlite3.Row, cfg: dict[str, Any]) -> Check | None:
        """A check to run once the judge accepted the run (its result ranks, never fails it)."""
        return None

    def reset_on_rerun(
        self, run: sqlite3.Row, runs: list[sqlite3.Row]
    ) -> tuple[list[str], list[str]]:
        """(run ids to delete, run ids to queue again) when `run` is rerun."""
        return [], []

    def rank(self, runs: list[sqlite3.Row]) -> dict[str, dict[str, Any]]:
        """Updates per run id once every run succeeded (scores, ranks)."""
        return {}

    def redo_refusal(self, run: sqlite3.Row, runs: list[sqlite3.Row]) -> str | None:
        """Why `run` may not be rerun or followed up now (None: it may)."""
        return None

    def blocker(self, runs: list[sqlite3.Row]) -> str | None:
        """Why the batch waits on the user (`blocked`), or None. Only a staged workflow blocks:
        its next stage needs every run that failed to be redone or set aside."""
        if not self.staged:
            return None
        failed = [r for r in runs if RunState(r["state"]) in RUN_BLOCKING]
        if not failed:
            return None
        first = failed[0]
        return (
            f"{first['title']} failed ({first['failure']}); rerun or resume it to continue, or "
            "stop it to go on without it"
        )

    def stop_sets_aside(self, run: sqlite3.Row) -> bool:
        """Whether run_stop of this settled run sets it aside (failed -> cancelled): a run
        that blocks a staged batch; the next stage goes on with the runs that remain."""
        return self.staged and RunState(run["state"]) in RUN_BLOCKING

    def shortfall(self, cfg: dict[str, Any], runs: list[sqlite3.Row]) -> str | None:
        """Why a batch with nothing left to run still has no result (its runs were all
        stopped): it ends failed, saying so. None: it completes."""
        return None


class Repeated(Workflow):
    name = "repeated"


class Generated(Workflow):
    name = "generated"
    stages = ("generator", "worker")

    def initial_runs(self, cfg: dict[str, Any]) -> list[RunSpec]:
        prompt = (
            f"{cfg['prompt']}\n\nReply with a JSON array of exactly {cfg['runs']} tasks, each an "
            'object {"title": "...", "prompt": "..."}, and nothing else.'
        )
        return [RunSpec("generator", 1, "generator", prompt, "read_only", worktree=False)]

    def follow_on_runs(self, cfg: dict[str, Any], runs: list[sqlite3.Row]) -> list[RunSpec]:
        generator = next((r for r in runs if r["stage"] == "generator"), None)
        if (
            generator is None
            or generator["state"] != RunState.SUCCEEDED
            or any(r["stage"] == "worker" for r in runs)
        ):
            return []
        tasks = json.loads(generator["result_json"])
        return [
            RunSpec("worker", n, task["title"], task["prompt"], cfg["profile"], worktree=True)
            for n, task in enumerate(tasks, start=1)
        ]

    def judge(self, run: sqlite3.Row, evidence: Evidence, cfg: dict[str, Any]) -> RunOutcome:
        if run["stage"] != "generator":
            return RunOutcome(True)
        try:
            tasks = [Task.model_validate(t) for t in parse_json_reply(evidence.answer or "")]
        except (ValueError, TypeError, ValidationError) as exc:
            return RunOutcome(
                False, f"error_reply: the generator's reply is not a JSON list of tasks ({exc})"
            )
        if len(tasks) != cfg["runs"]:
            return RunOutcome(False, f"error_reply: {len(tasks)} tasks, not exactly {cfg['runs']}")
        return RunOutcome(True, result=[t.model_dump() for t in tasks])

    def retries(self, stage: str) -> int:
        return 1 if stage == "generator" else 0  # a generator's malformed reply gets one more try

    def redo_refusal(self, run: sqlite3.Row, runs: list[sqlite3.Row]) -> str | None:
        workers = [r for r in runs if r["stage"] == "worker"]
        if run["stage"] == "generator" and workers:  # a new task list would change nothing
            return (
                f"its {len(workers)} worker run(s) were made from its task list; start a new "
                "batch for new tasks"
            )
        return None


class Ranked(Workflow):
    name = "ranked"
    options = frozenset({"reviewers", "review_prompt", "verify_command", "verify_timeout_seconds"})
    staged = True
    main_stage = "candidate"
    stages = ("candidate", "reviewer")

    def initial_runs(self, cfg: dict[str, Any]) -> list[RunSpec]:
        prompt = (
            f"{cfg['prompt']}\n\nWork on your own branch. When you are done, commit your change "
            "exactly once with the worker tool create_commit (message and the files you changed)."
        )
        return [
            RunSpec("candidate", n, f"candidate {n}", prompt, "write", worktree=True, locked=True)
            for n in range(1, cfg["runs"] + 1)
        ]

    def follow_on_runs(self, cfg: dict[str, Any], runs: list[sqlite3.Row]) -> list[RunSpec]:
        wanted = []
        reviewed = {r["parent_run_id"] for r in runs if r["stage"] == "reviewer"}
        k = cfg["reviewers"]
        for candidate in runs:
            if (
                candidate["stage"] != "candidate"
                or candidate["state"] != RunState.SUCCEEDED
                or candidate["id"] in reviewed
            ):
                continue
            focus = cfg.get("review_prompt") or "correctness, simplicity and tests"
            prompt = (
                f"Review candidate {candidate['idx']}: the change committed on branch {candidate['branch']} "
                f"in this worktree, against the base commit. Judge it on the following.\n{focus}\n"
                "Then call the worker tool submit_score exactly once with a score from 0 to 100 "
                "and your reason."
            )
            wanted += [
                RunSpec(
                    "reviewer",
                    (candidate["idx"] - 1) * k + j,
                    f"review {j} of candidate {candidate['idx']}",
                    prompt,
                    "read_only",
                    worktree=False,
                    parent_run_id=candidate["id"],
                    locked=True,
                )
                for j in range(1, k + 1)
            ]
        return wanted

    def worker_tools(self, stage: str) -> list[str]:
        return ["finish", "create_commit"] if stage == "candidate" else ["finish", "submit_score"]

    def judge(self, run: sqlite3.Row, evidence: Evidence, cfg: dict[str, Any]) -> RunOutcome:
        if run["stage"] == "candidate":
            calls = [
                c for c in evidence.reports.get("create_commit", []) if c.get("state") != "failed"
            ]
            if not calls:
                return RunOutcome(False, "no_commit: the candidate never called create_commit")
            if not evidence.commits:  # an intent whose commit never happened
                return RunOutcome(
                    False, "no_commit: create_commit was called but the branch has no commit"
                )
            return RunOutcome(True, result={"commits": evidence.commits})
        scores = evidence.reports.get("submit_score") or []
        if not scores:
            return RunOutcome(False, "no_score: the reviewer never called submit_score")
        return RunOutcome(True, result=scores[-1])

    def post_success_check(self, run: sqlite3.Row, cfg: dict[str, Any]) -> Check | None:
        if run["stage"] == "candidate" and cfg.get("verify_command"):
            return Check(cfg["verify_command"], cfg["verify_timeout_seconds"])
        return None

    def reset_on_rerun(
        self, run: sqlite3.Row, runs: list[sqlite3.Row]
    ) -> tuple[list[str], list[str]]:
        if run["stage"] == "candidate":
            return [r["id"] for r in runs if r["parent_run_id"] == run["id"]], []
        return [], []

    def rank(self, runs: list[sqlite3.Row]) -> dict[str, dict[str, Any]]:
        """Each candidate's score, rank and reason (domain.run_results.RANKING_RULE): those
        that succeeded, each over the reviews that did; a stopped one gets none."""
        candidates = [
            Candidate(
                run_id=c["id"],
                index=c["idx"],
                scores=tuple(
                    float(json.loads(r["result_json"])["score"])
                    for r in runs
                    if r["parent_run_id"] == c["id"]
                    and r["state"] == RunState.SUCCEEDED
                    and r["result_json"]
                ),
                verify_passed=None if c["verify_passed"] is None else bool(c["verify_passed"]),
                lines_changed=_lines_changed(c),
            )
            for c in runs
            if c["stage"] == "candidate" and c["state"] == RunState.SUCCEEDED
        ]
        return {
            r.run_id: {"score": r.score, "rank": r.rank, "rank_reason": r.reason}
            for r in rank_candidates(candidates)
        }

    def shortfall(self, cfg: dict[str, Any], runs: list[sqlite3.Row]) -> str | None:
        if any(r["stage"] == "candidate" and r["state"] == RunState.SUCCEEDED for r in runs):
            return None
        return "no candidate succeeded: every one was stopped, nothing to rank"


def _lines_changed(run: sqlite3.Row) -> int | None:
    """Lines added and removed by a run, as measured when it settled (None: not measured)."""
    if not run["diff_json"]:
        return None
    diff = json.loads(run["diff_json"])
    return int(diff["insertions"]) + int(diff["deletions"])


class Validated(Workflow):
    name = "validated"
    options = frozenset({"validator_prompt"})
    staged = True
    stages = ("worker", "validator")

    def initial_runs(self, cfg: dict[str, Any]) -> list[RunSpec]:
        prompt = (
            f"{cfg['prompt']}\n\nWhen you are done, call the worker tool submit_result exactly once, "
            "listing each file you changed with an explanation."
        )
        runs = [
            RunSpec("worker", n, f"worker {n}", prompt, cfg["profile"], worktree=True, locked=True)
            for n in range(1, cfg["runs"] + 1)
        ]
        return runs

    def follow_on_runs(self, cfg: dict[str, Any], runs: list[sqlite3.Row]) -> list[RunSpec]:
        workers = _remaining_workers(runs)  # a stopped worker is set aside
        if (
            not workers
            or any(r["stage"] == "validator" for r in runs)
            or not all(w["state"] == RunState.SUCCEEDED for w in workers)
        ):
            return []
        listing = "\n".join(f"- worker {w['idx']}: {w['workdir']}" for w in workers)
        focus = cfg.get("validator_prompt") or "Does each worker's change do the task correctly?"
        prompt = (
            f"Validate the work of {len(workers)} workers on this task:\n{cfg['prompt']}\n\n"
            f"Their folders (read-only for you):\n{listing}\n\n{focus}\n"
            "Then call the worker tool finish with status done and, as the summary, only JSON: "
            '{"workers": [{"worker": N, "pass": true, "reason": "..."}], "winner": N}.'
        )
        return [
            RunSpec("validator", 1, "validator", prompt, "read_only", worktree=False, locked=True)
        ]

    def worker_tools(self, stage: str) -> list[str]:
        return ["finish", "submit_result"] if stage == "worker" else ["finish"]

    def read_roots(self, run: sqlite3.Row, runs: list[sqlite3.Row]) -> list[str]:
        return (
            [r["workdir"] for r in _remaining_workers(runs)] if run["stage"] == "validator" else []
        )

    def judge(self, run: sqlite3.Row, evidence: Evidence, cfg: dict[str, Any]) -> RunOutcome:
        if run["stage"] == "worker":
            results = evidence.reports.get("submit_result") or []
            if len(results) != 1:
                return RunOutcome(
                    False, f"submit_result: called {len(results)} times, not exactly once"
                )
            return RunOutcome(True, result=results[0])
        finish = evidence.reports.get("finish") or []
        try:
            verdict = Verdict.model_validate(
                parse_json_reply(finish[-1]["summary"] if finish else "")
            )
        except (ValueError, TypeError, ValidationError) as exc:
            return RunOutcome(
                False, f"error_reply: the validator's verdict is not valid JSON ({exc})"
            )
        return RunOutcome(True, result=verdict.model_dump(by_alias=True))

    def reset_on_rerun(
        self, run: sqlite3.Row, runs: list[sqlite3.Row]
    ) -> tuple[list[str], list[str]]:
        if run["stage"] == "worker":
            return [r["id"] for r in runs if r["stage"] == "validator"], []
        return [], []

    def shortfall(self, cfg: dict[str, Any], runs: list[sqlite3.Row]) -> str | None:
        if not _remaining_workers(runs):
            return "every worker was stopped: nothing to validate"
        validator = next((r for r in runs if r["stage"] == "validator"), None)
        if validator is not None and validator["state"] != RunState.SUCCEEDED:
            return "the validator was stopped: no verdict"
        return None


def _remaining_workers(runs: list[sqlite3.Row]) -> list[sqlite3.Row]:
    """A validated batch's workers but those stopped (set aside)."""
    return [r for r in runs if r["stage"] == "worker" and RunState(r["state"]) not in RUN_SET_ASIDE]


WORKFLOWS: dict[str, Workflow] = {
    w.name: w for w in (Repeated(), Generated(), Ranked(), Validated())
}
WORKFLOW_OPTIONS = frozenset().union(*(w.options for w in WORKFLOWS.values()))


def workflow_named(name: str) -> Workflow:
    """The workflow called `name`; InvalidRequest naming the field when there is none."""
    if name not in WORKFLOWS:
        raise InvalidRequest(
            f"unknown workflow {name!r}; one of {', '.join(WORKFLOWS)}", field="workflow"
        )
    return WORKFLOWS[name]


def check_stage(workflow: Workflow, stage: str) -> None:
    """A run's stage must be one of its workflow's; the database no longer pins the names."""
    if stage not in workflow.stages:
        raise InvalidRequest(
            f"stage {stage!r} is not one of the {workflow.name} workflow's "
            f"({', '.join(workflow.stages)})",
            field="stage",
        )
