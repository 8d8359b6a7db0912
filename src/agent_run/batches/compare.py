"""`runs_compare`: 2 to 4 runs of one batch side by side: their views (answer excerpt, diff
stats, verify, score, rank, reviews), their answers, and for every file any of them changed
each run's diff of that file against the pinned base. Git runs off the event loop, once per
run (one numstat, one diff, split by file); every text is bounded and says where it was cut."""

import asyncio
import re
import sqlite3
from pathlib import Path

from agent_run.batches.views import batch_view
from agent_run.domain import batch_models as bm
from agent_run.domain import compare_models as cm
from agent_run.domain.errors import AnswerIntegrity, GitError, InvalidRequest
from agent_run.services.context import ServiceContext
from agent_run.services.integrity import verified_answer
from agent_run.store import agents as agents_q
from agent_run.system import git
from agent_run.system.home import Home

_FILE_HEADER = re.compile(r"(?m)^(?=diff --git )")
CUT = "\n… (cut: the rest of this file's diff is left out)"


def _chosen(view: bm.BatchView, run_ids: list[str]) -> list[bm.RunView]:
    """The runs asked for, in that order; a run of another batch or a repeat is refused."""
    by_id = {r.id: r for r in view.runs}
    if len(set(run_ids)) != len(run_ids):
        raise InvalidRequest("a run is named twice", field="run_ids")
    for n, run_id in enumerate(run_ids):
        if run_id not in by_id:
            raise InvalidRequest(f"no run {run_id} in batch {view.id}", field=f"run_ids.{n}")
    return [by_id[run_id] for run_id in run_ids]


def _answer(conn: sqlite3.Connection, home: Home, run: bm.RunView) -> cm.CompareRun:
    latest = agents_q.latest_execution(conn, run.agent_id) if run.agent_id else None
    if latest is None or latest["answer_sha256"] is None:
        return cm.CompareRun(run=run, answer_note=f"no answer: the run is {run.state}")
    try:
        text = verified_answer(conn, home, latest, "runs compare")
    except AnswerIntegrity as exc:
        return cm.CompareRun(run=run, answer_note=exc.message)
    cut = len(text) > cm.ANSWER_CHARS
    return cm.CompareRun(run=run, answer=text[: cm.ANSWER_CHARS], answer_truncated=cut)


def file_diffs(worktree: str | None, base_sha: str) -> dict[str, cm.FileSide]:
    """One run's diff split by file (path -> its side), from one numstat and one diff, in
    the same order (renames not followed in either)."""
    if not worktree or not Path(worktree).is_dir():
        return {}
    try:
        stats = git.numstat(Path(worktree), base_sha)
        text, whole_cut = git.diff_against(Path(worktree), base_sha, renames=False)
    except GitError:
        if not Path(worktree).is_dir():  # removed under us (batch clean)
            return {}
        raise
    sections = [s for s in _FILE_HEADER.split(text) if s]
    sides = {}
    for n, stat in enumerate(stats):
        section = sections[n] if n < len(sections) else ""
        # the whole diff was cut inside this file's section or before it
        cut = whole_cut and n >= len(sections) - 1
        if len(section) > cm.FILE_DIFF_CHARS:
            section, cut = section[: cm.FILE_DIFF_CHARS] + CUT, True
        sides[stat.path] = cm.FileSide(
            run_id="",
            changed=True,
            added=stat.added,
            removed=stat.removed,
            diff=section,
            truncated=cut,
        )
    return sides


def _files(runs: list[bm.RunView], diffs: list[dict[str, cm.FileSide]]) -> list[cm.CompareFile]:
    paths = sorted(set().union(*diffs))
    return [
        cm.CompareFile(
            path=path,
            sides=[
                d[path].model_copy(update={"run_id": run.id})
                if path in d
                else cm.FileSide(run_id=run.id, changed=False)
                for run, d in zip(runs, diffs, strict=True)
            ],
        )
        for path in paths
    ]


async def runs_compare(ctx: ServiceContext, p: cm.RunsCompareParams) -> cm.RunsCompare:
    view = await ctx.db(batch_view, p.batch_id)
    runs = _chosen(view, p.run_ids)
    answers = [await ctx.db(_answer, ctx.home, run) for run in runs]
    diffs = [await asyncio.to_thread(file_diffs, run.worktree, view.base_sha) for run in runs]
    files = _files(runs, diffs)
    return cm.RunsCompare(
        batch_id=view.id,
        title=view.title,
        base_sha=view.base_sha,
        ranking_rule=view.ranking_rule,
        runs=answers,
        files=files[: cm.MAX_FILES],
        files_truncated=len(files) > cm.MAX_FILES,
        revision=view.revision,
    )
