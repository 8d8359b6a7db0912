"""`batch compare`'s text: the runs side by side (one line each: rank, score, result), their
answers, then each changed file with every run's diff of it, one after the other."""

from typing import Any

from agent_run.text.batch import WIDTH, result_line, wrapped


def _s(value: Any) -> str:
    return str(getattr(value, "value", value))


def _run_head(n: int, item: Any) -> list[str]:
    run = item.run
    rank = f"#{run.rank}" if run.rank is not None else "-"
    score = f"score {run.score:g}" if run.score is not None else "no score"
    lines = [f"[{n}] {run.id}  {run.title}  {_s(run.state)}  rank {rank}  {score}"]
    if (result := result_line(run)) is not None:
        lines.append(f"    result {result}")
    for review in run.reviews or []:
        shown = "-" if review.score is None else f"{review.score:g}"
        lines += wrapped(f"review {shown}", review.reason or "", 4)
    if run.rank_reason:
        lines += wrapped("why", run.rank_reason, 4)
    return lines


def _answer(n: int, item: Any) -> list[str]:
    if item.answer is None:
        return [f"--- answer [{n}]: {item.answer_note or 'none'}"]
    cut = " (cut)" if item.answer_truncated else ""
    return [f"--- answer [{n}]{cut}", *item.answer.rstrip("\n").splitlines()]


def _file(f: Any, numbers: dict[str, int]) -> list[str]:
    lines = ["=" * min(WIDTH, 60), f"file {f.path}"]
    for side in f.sides:
        n = numbers[side.run_id]
        if not side.changed:
            lines.append(f"--- [{n}] unchanged")
            continue
        cut = " (cut)" if side.truncated else ""
        lines.append(f"--- [{n}] +{side.added} -{side.removed}{cut}")
        lines += side.diff.rstrip("\n").splitlines()
    return lines


def render_compare(c: Any) -> str:
    """A `RunsCompare`: the runs, their answers, then each file's diffs by run number."""
    numbers = {item.run.id: n for n, item in enumerate(c.runs, start=1)}
    lines = [f"{c.title}  ({c.batch_id}, base {c.base_sha[:12]})"]
    for n, item in enumerate(c.runs, start=1):
        lines += _run_head(n, item)
    for n, item in enumerate(c.runs, start=1):
        lines += _answer(n, item)
    if not c.files:
        lines.append("no file changed in any of these runs")
    for f in c.files:
        lines += _file(f, numbers)
    if c.files_truncated:
        lines.append("(more files changed: the rest are left out)")
    if c.ranking_rule:
        lines += wrapped("ranking:", c.ranking_rule, 0)
    return "\n".join(lines)
