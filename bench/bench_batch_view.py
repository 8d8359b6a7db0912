"""A 50-run batch's view with each run's result: the `batch` tool call and the web batch page.

Daemons: a user's (a fresh `agent-run api serve` in a fresh temp home), demo engine, no
sandbox; one running this tree and, with `--ref COMMIT`, one running that commit's `src/`, each
with its own `agent-run web` (a fresh interpreter too). In each, one repeated batch of RUNS runs
whose agents change a tracked file, add an untracked one and answer, run to completion (this
tree: until every run's result is measured too). Then ROUNDS rounds, the trees interleaved:
`batch` on a kept connection, and `GET /batches/<id>` signed in (the page renders the view).

The claim (issue 37): carrying each run's result (answer excerpt, diff stats, duration,
reviews, activity) keeps the 50-run view within 1.5x of the view before it: the result is
measured once when a run settles and read from its row, never recomputed per request.

Run:  uv run python bench/bench_batch_view.py --ref d077f44 [--runs 50] [--rounds 40]
"""

import argparse
import contextlib
import os
import shutil
import time
from typing import Any

from _common import (
    BENCH_CONFIG,
    daemon_env,
    machine_info,
    print_table,
    ratio,
    ref_tree,
    summary,
    wait_for,
    write_results,
)

from tests.batch_harness import make_repo, wait_batch
from tests.web_harness import WebProcess

PROMPT = (
    "write: README.md = # changed by the run\nwrite: notes.txt = the run's notes\n"
    "tokens: 100\ncost: 0.001\nanswer: I changed the README and wrote my notes down"
)


def run_batch(daemon: Any, runs: int, repos: list[Any]) -> str:
    repo = make_repo()
    repos.append(repo.parent)
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": runs,
            "concurrency": 8,
            "runtime": "demo",
            "prompt": PROMPT,
        },
    )
    done = wait_batch(daemon, batch["id"], timeout=600)
    assert done["state"] == "completed", done["state_reason"]

    def measured() -> bool:  # this tree: every run's result stored (an older tree has none)
        runs_now = daemon.call("batch", {"batch_id": batch["id"]})["runs"]
        return all(r.get("diff", True) is not None for r in runs_now)

    wait_for(measured, timeout=120, what="every run measured")
    return str(batch["id"])


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/PID/stat): what it spent, whatever else ran."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_call(pids: dict[str, int], calls: int, fn: Any) -> dict[str, float]:
    """Each process's CPU seconds per call over `calls` calls of `fn`."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    for _ in range(calls):
        fn()
    return {name: (cpu_seconds(pid) - before[name]) / calls for name, pid in pids.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--ref", help="also measure this commit's src/ (before/after)")
    args = parser.parse_args()
    config = BENCH_CONFIG + 'sandbox = "none"\n'
    trees: dict[str, dict[str, Any]] = {}
    repos: list[Any] = []
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [shutil.rmtree(r, ignore_errors=True) for r in repos])
        ref_env = stack.enter_context(ref_tree(args.ref))
        envs = {"this tree": {"PYTHONPATH": ""}}  # a PYTHON* variable: a fresh interpreter
        if ref_env is not None:
            envs = {f"ref {args.ref[:9]}": ref_env, **envs}
        for name, env in envs.items():
            home, daemon, _ = stack.enter_context(daemon_env(config, env=env, fresh=True))
            web = WebProcess(home, env=env).start()
            stack.callback(web.stop)
            client = web.client()
            stack.callback(client.close)
            rpc = daemon.client()
            stack.enter_context(rpc)
            batch_id = run_batch(daemon, args.runs, repos)
            pids = {"daemon": daemon.call("ping")["pid"], "web": web.proc.pid}
            trees[name] = {
                "rpc": rpc,
                "web": client,
                "batch": batch_id,
                "tool": [],
                "page": [],
                "pids": pids,
            }
        for tree in trees.values():  # warm: imports, templates, caches
            for _ in range(3):
                tree["rpc"].call("batch", {"batch_id": tree["batch"]})
                tree["web"].get(f"/batches/{tree['batch']}")
        for _ in range(args.rounds):
            for tree in trees.values():
                tree["tool"].append(
                    timed(lambda t=tree: t["rpc"].call("batch", {"batch_id": t["batch"]}))
                )
                tree["page"].append(
                    timed(lambda t=tree: t["web"].get(f"/batches/{t['batch']}").raise_for_status())
                )
        for tree in trees.values():  # CPU per call: robust to a loaded machine
            tree["cpu_tool"] = cpu_per_call(
                tree["pids"],
                args.rounds,
                lambda t=tree: t["rpc"].call("batch", {"batch_id": t["batch"]}),
            )
            tree["cpu_page"] = cpu_per_call(
                tree["pids"],
                args.rounds,
                lambda t=tree: t["web"].get(f"/batches/{t['batch']}").raise_for_status(),
            )
    this = trees["this tree"]
    rows = []
    for name, tree in trees.items():
        for what in ("tool", "page"):
            s = summary(tree[what])
            base = summary(this[what])["p50"]
            rows.append(
                [
                    name,
                    "`batch` call" if what == "tool" else "web page",
                    f"{s['p50'] * 1000:.1f}",
                    f"{s['p95'] * 1000:.1f}",
                    f"{ratio(base, s['p50']):.2f}x",
                ]
            )
    print(f"a {args.runs}-run batch's view, {args.rounds} rounds interleaved")
    print_table(["tree", "what", "p50 ms", "p95 ms", "this tree / it (p50)"], rows)
    cpu_rows = []
    for name, tree in trees.items():
        for what in ("cpu_tool", "cpu_page"):
            for proc, secs in tree[what].items():
                mine = this[what][proc]
                label = "`batch` call" if what == "cpu_tool" else "web page"
                cpu_rows.append(
                    [name, label, proc, f"{secs * 1000:.1f}", f"{ratio(mine, secs):.2f}x"]
                )
    print("CPU per call (utime + stime)")
    print_table(["tree", "what", "process", "CPU ms", "this tree / it"], cpu_rows)
    write_results(
        "batch_view",
        {
            "machine": machine_info(),
            "runs": args.runs,
            "samples": {n: {"tool": t["tool"], "page": t["page"]} for n, t in trees.items()},
            "summary": {
                n: {"tool": summary(t["tool"]), "page": summary(t["page"])}
                for n, t in trees.items()
            },
            "cpu_per_call": {
                n: {"tool": t["cpu_tool"], "page": t["cpu_page"]} for n, t in trees.items()
            },
        },
    )


if __name__ == "__main__":
    main()
