"""What agents cost while their engines are silent (a real engine waiting on its model).

Daemon: a user's (a fresh `agent-run api serve` in a fresh temp home), demo engine, no sandbox.
N agents each run `sleep: S` (the engine says nothing for S seconds) and are cancelled at the
end. Over ROUNDS windows of WINDOW seconds, from /proc:

    supervisor CPU   utime+stime of the N supervisors, per agent per second
    passes           voluntary context switches of each supervisor's main thread per second
                     (one per pass of its loop: it sleeps in epoll between passes)
    daemon CPU       the daemon's utime+stime per second

With `--ref COMMIT` a second daemon runs COMMIT's src/ beside this tree's, with its own N
agents, measured over the same windows: the before/after ratio is of one run on one machine.

Run:  uv run python bench/bench_silent.py [--agents 20] [--rounds 3] [--window 5] [--ref COMMIT]
"""

import argparse
import contextlib
import os
import time
from pathlib import Path

from _common import (
    BENCH_CONFIG,
    daemon_env,
    db_rows,
    machine_info,
    print_table,
    ratio,
    ref_tree,
    summary,
    wait_all_terminal,
    wait_for,
    write_results,
)

from agent_run.rpc.client import RawClient

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main_thread_switches(pid: int) -> int:
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if "voluntary_ctxt" in line))


class Silent:
    """A daemon with `agents` silent agents running."""

    def __init__(self, stack: contextlib.ExitStack, agents: int, seconds: float, env) -> None:
        config = BENCH_CONFIG + 'sandbox = "none"\n'
        self.home, self.daemon, workdir = stack.enter_context(
            daemon_env(config, env=env, fresh=True)
        )
        with RawClient(self.home.socket_path, timeout=60) as client:
            self.ids = [
                client.call("start", {"task": f"sleep: {seconds}", "workdir": str(workdir)})["id"]
                for _ in range(agents)
            ]

        def running() -> list[int] | None:
            rows = db_rows(
                self.home, "SELECT supervisor_pid FROM executions WHERE state = 'running'"
            )
            return [r[0] for r in rows] if len(rows) == agents else None

        self.supervisors = wait_for(running, timeout=120, what="the agents running")

    def sample(self) -> tuple[float, int, float]:
        return (
            sum(cpu_seconds(pid) for pid in self.supervisors),
            sum(main_thread_switches(pid) for pid in self.supervisors),
            cpu_seconds(self.daemon.proc.pid),
        )

    def stop(self) -> None:
        with RawClient(self.home.socket_path, timeout=60) as client:
            for agent_id in self.ids:
                client.call("cancel", {"agent_id": agent_id})
        wait_all_terminal(self.home, self.ids, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--ref", help="also measure this commit's src/ (before/after)")
    args = parser.parse_args()
    seconds = args.rounds * args.window + 60 + args.agents
    results: dict[str, dict[str, list[float]]] = {}
    with contextlib.ExitStack() as stack:
        runs: dict[str, Silent] = {}
        ref_env = stack.enter_context(ref_tree(args.ref))
        if ref_env is not None:
            runs[f"ref {args.ref[:9]}"] = Silent(stack, args.agents, seconds, ref_env)
        runs["this tree"] = Silent(stack, args.agents, seconds, None)
        time.sleep(2.0)  # past the engines' first lines: silent from here on
        results = {name: {"cpu": [], "passes": [], "daemon": []} for name in runs}
        for _ in range(args.rounds):
            before = {name: run.sample() for name, run in runs.items()}
            t0 = time.monotonic()
            time.sleep(args.window)
            elapsed = time.monotonic() - t0
            for name, run in runs.items():
                after, (cpu0, switches0, daemon0) = run.sample(), before[name]
                per_agent = args.agents * elapsed
                results[name]["cpu"].append((after[0] - cpu0) / per_agent)
                results[name]["passes"].append((after[1] - switches0) / per_agent)
                results[name]["daemon"].append((after[2] - daemon0) / elapsed)
        for run in runs.values():
            run.stop()
    s = {name: {k: summary(v) for k, v in r.items()} for name, r in results.items()}
    rows = []
    base = s.get(f"ref {args.ref[:9]}") if args.ref else None
    for name, m in s.items():
        cpu = m["cpu"]["p50"]
        rows.append(
            [
                name,
                f"{cpu * 1e3:.2f}",
                f"{m['passes']['p50']:.1f}",
                f"{m['daemon']['p50'] * 1e3:.1f}",
                f"{ratio(cpu, base['cpu']['p50']):.2f}x" if base else "",
            ]
        )
    print(
        f"{args.agents} silent agents per daemon; p50 of {args.rounds} windows of {args.window} s"
    )
    print_table(
        ["src", "supervisor CPU ms/s per agent", "passes/s per agent", "daemon CPU ms/s", "vs ref"],
        rows,
    )
    write_results("silent", {"machine": machine_info(), "agents": args.agents, "runs": s})


if __name__ == "__main__":
    main()
