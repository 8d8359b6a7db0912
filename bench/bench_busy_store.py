"""Chatty agents on a loaded machine: do they all succeed with every message stored once?

A busy machine makes the state database's write lock slow to come by: each supervisor writes
its agent's messages in small transactions, and a writer that holds the lock may wait for a CPU
while the others queue behind it. Until 2026-12-07 a supervisor whose write waited out the 30 s
busy timeout failed its healthy agent (`supervisor_failed`, or `lost` when even its last write
failed); now it holds what it was writing and tries again, and writes less often, in larger
transactions, while writes are slow.

Per daemon (a user's: a fresh `agent-run api serve`, `sandbox = "none"`, the default nice):
AGENTS demo agents each stream STEPS messages 10 ms apart (~100 messages/s each), started at
once, beside HOGS CPU-bound processes (each in its own session, as a user's builds are) that
keep the machine's load >= 50 on 2 cores. Measured: how many agents succeed, each failure's
kind and message, whether each agent's messages are all stored exactly once, the wall time
until all are terminal, the machine's 1-minute load average (highest seen) and the runnable
processes (`procs_running`, sampled). With `--ref COMMIT` the same run against COMMIT's src/
first (before), then this tree (after), rounds alternating. Baseline: the same agents on this
tree without the hogs, in the same run (wall time ratio: loaded / quiet).

Run:  uv run python bench/bench_busy_store.py [--agents 60] [--steps 100] [--hogs 40]
                                              [--rounds 1] [--ref COMMIT]
"""

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

from _common import (
    BENCH_CONFIG,
    daemon_env,
    db_rows,
    machine_info,
    print_table,
    ratio,
    ref_tree,
    wait_all_terminal,
    write_results,
)

from agent_run.rpc.client import RawClient


class Hogs:
    """CPU-bound processes, each in a session of its own, until `stop`."""

    def __init__(self, count: int) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(count)
        ]

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


class LoadWatch:
    """Samples the load average and the runnable processes every half second, on a thread."""

    def __init__(self) -> None:
        self.load1: list[float] = []
        self.running: list[int] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.5):
            self.load1.append(os.getloadavg()[0])
            with open("/proc/stat") as fh:
                line = next(line for line in fh if line.startswith("procs_running"))
            self.running.append(int(line.split()[1]))

    def stop(self) -> dict[str, float]:
        self.done.set()
        self.thread.join()
        return {
            "load1_max": max(self.load1, default=0.0),
            "procs_running_mean": sum(self.running) / max(1, len(self.running)),
        }


def one_run(agents: int, steps: int, hogs: int, env: dict[str, str] | None) -> dict[str, Any]:
    config = BENCH_CONFIG + 'sandbox = "none"\n'
    task = "steps: {steps}\nstep_seconds: 0.01\nanswer: agent {n} done"
    with contextlib.ExitStack() as stack:
        home, _daemon, workdir = stack.enter_context(daemon_env(config, env=env, fresh=True))
        load = LoadWatch()
        crowd = Hogs(hogs)
        stack.callback(crowd.stop)
        started = time.monotonic()
        with RawClient(home.socket_path, timeout=600) as client:
            ids = [
                client.call(
                    "start", {"task": task.format(steps=steps, n=n), "workdir": str(workdir)}
                )["id"]
                for n in range(agents)
            ]
        states = wait_all_terminal(home, ids, timeout=900)
        wall = time.monotonic() - started
        crowd.stop()
        machine = load.stop()
        return {"wall_s": wall, **machine, **verdicts(home, ids, states, steps)}


def verdicts(home: Any, ids: list[str], states: dict[str, str], steps: int) -> dict[str, Any]:
    """How the agents ended, and whether each stored every step it streamed exactly once."""
    failures = Counter()
    messages = []
    whole = 0
    for agent_id in ids:
        row = db_rows(
            home,
            "SELECT state, failure_kind, failure_message FROM executions WHERE agent_id = ?",
            (agent_id,),
        )[0]
        if row["state"] != "succeeded":
            failures[f"{row['state']}/{row['failure_kind']}"] += 1
            messages.append((row["failure_message"] or "")[:200])
        stored = db_rows(
            home,
            "SELECT count(*) AS n, count(DISTINCT content) AS d FROM messages "
            "WHERE agent_id = ? AND content LIKE 'step %'",
            (agent_id,),
        )[0]
        whole += stored["n"] == stored["d"] == steps
    return {
        "succeeded": sum(state == "succeeded" for state in states.values()),
        "failures": dict(failures),
        "failure_messages": sorted(set(messages))[:10],
        "all_steps_once": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=60)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--hogs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ref", help="also run this commit's src/ (before), alternating")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {}
    with ref_tree(args.ref) as ref_env:
        runs["quiet, this tree"] = [one_run(args.agents, args.steps, 0, None)]
        for _ in range(args.rounds):
            if ref_env is not None:
                loaded = one_run(args.agents, args.steps, args.hogs, ref_env)
                runs.setdefault(f"loaded, ref {args.ref[:9]}", []).append(loaded)
            loaded = one_run(args.agents, args.steps, args.hogs, None)
            runs.setdefault("loaded, this tree", []).append(loaded)
    quiet = runs["quiet, this tree"][0]["wall_s"]
    rows = [
        [
            name,
            f"{r['succeeded']}/{args.agents}",
            f"{r['all_steps_once']}/{args.agents}",
            " ".join(f"{k}:{v}" for k, v in r["failures"].items()) or "-",
            f"{r['wall_s']:.1f}",
            f"{ratio(r['wall_s'], quiet):.2f}x",
            f"{r['load1_max']:.0f}",
            f"{r['procs_running_mean']:.0f}",
        ]
        for name, results in runs.items()
        for r in results
    ]
    print(f"{args.agents} agents x {args.steps} messages 10 ms apart; {args.hogs} CPU hogs")
    print_table(
        ["run", "succeeded", "steps once", "failures", "wall s", "/ quiet", "load1", "runnable"],
        rows,
    )
    for name, results in runs.items():
        for r in results:
            for message in r["failure_messages"]:
                print(f"  {name}: {message}")
    write_results("busy_store", {"machine": machine_info(), "args": vars(args), "runs": runs})


if __name__ == "__main__":
    main()
