"""`batch_start` of a repeated batch: the round trip that creates every run's git worktree.

Daemon: a user's (a fresh `agent-run api serve` in a fresh temp home), demo engine, no sandbox.
Each round starts a repeated batch of RUNS runs (`answer: x`, concurrency 1, so one agent is
started before the reply) in a fresh repository and times `batch_start` to its reply, then
cancels the batch and waits for it to settle.

Baseline, interleaved in the same loop: the git floor, RUNS `git worktree add -b BRANCH PATH
SHA` run one after another on a fresh repository, each in its own session as the daemon's
processes are (what the runs' worktrees cost by themselves).
`--ref COMMIT` adds a user's daemon running that commit's `src/`, its rounds interleaved too.

Run:  uv run python bench/bench_batch_start.py [--runs 50] [--rounds 5] [--ref COMMIT]
"""

import argparse
import contextlib
import shutil
import subprocess
import time

from _common import (
    BENCH_CONFIG,
    daemon_env,
    machine_info,
    print_table,
    ratio,
    ref_tree,
    summary,
    write_results,
)

from agent_run.system.git import NO_PROGRAMS
from tests.batch_harness import make_repo, wait_batch


def batch_start(daemon, runs: int) -> float:
    repo = make_repo()
    t0 = time.perf_counter()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": runs,
            "concurrency": 1,
            "runtime": "demo",
            "prompt": "answer: x",
            "profile": "read_only",
        },
    )
    took = time.perf_counter() - t0
    assert len(batch["runs"]) == runs, batch["counts"]
    daemon.call("batch_cancel", {"batch_id": batch["id"]})
    wait_batch(daemon, batch["id"], timeout=120)
    shutil.rmtree(repo.parent, ignore_errors=True)
    return took


def git_floor(runs: int) -> float:
    repo = make_repo()
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    t0 = time.perf_counter()
    for n in range(runs):
        path = repo.parent / f"wt-{n}"
        subprocess.run(
            ["git", *NO_PROGRAMS, "worktree", "add", "-q", "-b", f"b{n}", str(path), sha],
            cwd=repo,
            check=True,
            capture_output=True,
            start_new_session=True,  # its own session, as the daemon's are (autogroup)
        )
    took = time.perf_counter() - t0
    shutil.rmtree(repo.parent, ignore_errors=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ref", help="also measure this commit's src/ (before/after)")
    args = parser.parse_args()
    config = BENCH_CONFIG + 'sandbox = "none"\n'
    samples: dict[str, list[float]] = {"git floor": []}
    with contextlib.ExitStack() as stack:
        daemons = {}
        ref_env = stack.enter_context(ref_tree(args.ref))
        if ref_env is not None:
            daemons[f"ref {args.ref[:9]}"] = stack.enter_context(
                daemon_env(config, env=ref_env, fresh=True)
            )[1]
        daemons["this tree"] = stack.enter_context(daemon_env(config, fresh=True))[1]
        for name, daemon in daemons.items():  # a first batch each: imports, zygote
            batch_start(daemon, 2)
            samples[name] = []
        for _ in range(args.rounds):
            samples["git floor"].append(git_floor(args.runs))
            for name, daemon in daemons.items():
                samples[name].append(batch_start(daemon, args.runs))
    floor = summary(samples["git floor"])["p50"]
    rows = []
    for name, values in samples.items():
        s = summary(values)
        p50, top = s["p50"] * 1000, s["max"] * 1000
        rows.append([name, f"{p50:.0f}", f"{top:.0f}", f"{ratio(s['p50'], floor):.2f}x"])
    print(f"batch_start of {args.runs} worktree runs, p50 of {args.rounds} rounds")
    print_table(["", "p50 ms", "max ms", "/ git floor"], rows)
    write_results(
        "batch_start",
        {
            "machine": machine_info(),
            "runs": args.runs,
            "samples": samples,
            "summary": {k: summary(v) for k, v in samples.items()},
        },
    )


if __name__ == "__main__":
    main()
