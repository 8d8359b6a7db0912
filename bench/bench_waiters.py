"""What clients parked in `wait` cost the daemon while the agents they wait on stream events.

An orchestrator typically starts N agents and parks one `wait` per agent. Every event any
supervisor commits moves the store's revision, and every parked `wait` then looks at its agent
again; this bench measures what those looks cost.

Daemon: a user's (a fresh `agent-run api serve` in a fresh temp home), demo engine, no sandbox.
N agents each stream an event every 50 ms (`step_seconds: 0.05`) for as long as the rounds
last; they are cancelled at the end.

    no waiters   the daemon's CPU (utime+stime from /proc/PID/stat) over WINDOW seconds while
                 the N agents stream
    waiters      the same window with N client threads, each parked in `wait` (timeout WINDOW)
                 on its own agent

Figure: the daemon's CPU share (CPU seconds per second) in each phase, and their ratio; the
phases alternate ROUNDS times in the same daemon. `--ref COMMIT` runs COMMIT's src/ for a
before/after in the same process.

Run:  uv run python bench/bench_waiters.py [--agents 10] [--rounds 3] [--ref COMMIT]
"""

import argparse
import contextlib
import os
import threading
import time

from _common import (
    BENCH_CONFIG,
    daemon_env,
    machine_info,
    print_table,
    ratio,
    ref_tree,
    summary,
    wait_all_terminal,
    write_results,
)

from agent_run.rpc.client import RawClient

WINDOW = 3.0
STEP_SECONDS = 0.05
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def idle_window(pid: int) -> float:
    before = cpu_seconds(pid)
    time.sleep(WINDOW)
    return (cpu_seconds(pid) - before) / WINDOW


def waiting_window(pid: int, socket_path: str, ids: list[str]) -> float:
    clients = [RawClient(socket_path, timeout=60) for _ in ids]
    results: list[bool] = []

    def park(client: RawClient, agent_id: str) -> None:
        reply = client.call("wait", {"agent_id": agent_id, "timeout_seconds": WINDOW})
        results.append(reply["timed_out"])

    threads = [threading.Thread(target=park, args=pair) for pair in zip(clients, ids, strict=True)]
    before, t0 = cpu_seconds(pid), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    share = (cpu_seconds(pid) - before) / (time.perf_counter() - t0)
    for client in clients:
        client.close()
    assert len(results) == len(ids) and all(results), "every wait should time out mid-run"
    return share


def measure(agents: int, rounds: int, env: dict[str, str] | None) -> dict:
    config = BENCH_CONFIG + 'sandbox = "none"\n'
    with daemon_env(config, env=env, fresh=True) as (home, daemon, workdir):
        with RawClient(home.socket_path, timeout=60) as client:
            steps = int((2 * WINDOW * rounds + 30 + agents) / STEP_SECONDS)
            task = f"steps: {steps}\nstep_seconds: {STEP_SECONDS}\nanswer: done"
            ids = [
                client.call("start", {"task": task, "workdir": str(workdir)})["id"]
                for _ in range(agents)
            ]
            for agent_id in ids:  # every agent streaming before the first window
                while client.call("agent", {"agent_id": agent_id})["event_count"] < 3:
                    time.sleep(0.05)
        pid = daemon.proc.pid
        idle, waiting = [], []
        for _ in range(rounds):
            idle.append(idle_window(pid))
            waiting.append(waiting_window(pid, str(home.socket_path), ids))
        with RawClient(home.socket_path, timeout=60) as client:
            for agent_id in ids:
                client.call("cancel", {"agent_id": agent_id})
        wait_all_terminal(home, ids, timeout=120)
    return {"no_waiters": summary(idle), "waiters": summary(waiting)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ref", help="also measure this commit's src/ (before/after)")
    args = parser.parse_args()
    runs: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        ref_env = stack.enter_context(ref_tree(args.ref))
        if ref_env is not None:
            runs[f"ref {args.ref[:9]}"] = measure(args.agents, args.rounds, ref_env)
        runs["this tree"] = measure(args.agents, args.rounds, None)
    rows = []
    for name, run in runs.items():
        no, yes = run["no_waiters"]["p50"], run["waiters"]["p50"]
        rows.append([name, f"{no * 100:.1f} %", f"{yes * 100:.1f} %", f"{ratio(yes, no):.2f}x"])
    print(f"{args.agents} streaming agents; daemon CPU share (p50 of {args.rounds} windows)")
    print_table(["src", "no waiters", f"{args.agents} waiters", "waiters / none"], rows)
    write_results("waiters", {"machine": machine_info(), "agents": args.agents, "runs": runs})


if __name__ == "__main__":
    main()
