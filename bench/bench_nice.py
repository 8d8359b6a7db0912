"""The trade behind `[supervisor] nice`: the daemon's answers while agents swarm, against an
agent's own speed when the machine is busy with other work.

For each niceness (default 0, 5, 10; a user's daemon each, a fresh `api serve`, `sandbox =
"none"`), in rounds that alternate them:

- burst: 100 instant agents (`answer: burst <i>`) started at once over 20 connections, while a
  probe process cycles `ping`, `agent` and `list_agents` every 20 ms (bench_burst's); the
  `ping` p95 during the burst, over the same probe's p95 on the idle daemon just before.
- loaded: with HOGS CPU-bound processes running (each in its own session, as a user's builds
  are), SAMPLES instant agents (`answer: x`), one after another, start -> terminal, against
  the demo engine spawned directly by the bench (nice 0, its own session) with the same input
  under the same hogs, interleaved: the agent's time over the direct engine's, at p50.

A higher niceness keeps the daemon and the user's work responsive when agents saturate the
machine, and makes the agents slower when something else does.

Run:  uv run python bench/bench_nice.py [--nice 0 5 10] [--rounds 2] [--hogs 8] [--samples 5]
"""

import argparse
import asyncio
import time
from typing import Any

from _common import (
    BENCH_CONFIG,
    daemon_env,
    machine_info,
    percentile,
    print_table,
    ratio,
    summary,
    wait_all_terminal,
    write_results,
)
from bench_burst import burst, by_method, finish_probe, run_probe
from bench_busy_store import Hogs
from bench_fork_server import direct_engine, instant_agent

from agent_run.rpc.client import RawClient

BURST = 100
IDLE_SECONDS = 4.0


def config(nice: int) -> str:
    return BENCH_CONFIG.replace("[supervisor]\n", f"[supervisor]\nnice = {nice}\n") + (
        'sandbox = "none"\n'
    )


def burst_pings(home: Any, workdir: str) -> dict[str, Any]:
    """The probe's ping p95 on the idle daemon, then during a burst of BURST instant agents."""
    with RawClient(home.socket_path, timeout=120) as client:
        warm = client.call("start", {"task": "answer: warm", "workdir": workdir})
        client.call("wait", {"agent_id": warm["id"], "timeout_seconds": 60})
    idle = run_probe(str(home.socket_path), warm["id"])
    time.sleep(IDLE_SECONDS)
    idle_ping = by_method(finish_probe(idle))["ping"]
    during = run_probe(str(home.socket_path), warm["id"])
    began = time.monotonic()
    sent = asyncio.run(burst(str(home.socket_path), BURST, 20, workdir))
    states = wait_all_terminal(home, list(sent["ids"].values()), timeout=300)
    wall = time.monotonic() - began
    busy_ping = by_method(finish_probe(during))["ping"]
    return {
        "idle_ping_p95_ms": percentile(idle_ping, 95),
        "burst_ping_p95_ms": percentile(busy_ping, 95),
        "burst_wall_s": wall,
        "succeeded": sum(state == "succeeded" for state in states.values()),
    }


def loaded_agents(home: Any, workdir: str, hogs: int, samples: int) -> dict[str, Any]:
    """Instant agents and direct engines, interleaved, beside `hogs` CPU hogs."""
    crowd = Hogs(hogs)
    agent_s, direct_s = [], []
    try:
        with RawClient(home.socket_path, timeout=300) as client:
            for _ in range(samples):
                agent_s.append(instant_agent(home, client, workdir)[1])
                direct_s.append(direct_engine(workdir, str(home.root / "direct-home")))
    finally:
        crowd.stop()
    return {"agent_s": agent_s, "direct_s": direct_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nice", type=int, nargs="+", default=[0, 5, 10])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hogs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    runs: dict[int, list[dict[str, Any]]] = {nice: [] for nice in args.nice}
    for _ in range(args.rounds):
        for nice in args.nice:
            with daemon_env(config(nice), fresh=True) as (home, _daemon, workdir):
                result = burst_pings(home, str(workdir))
                result.update(loaded_agents(home, str(workdir), args.hogs, args.samples))
                runs[nice].append(result)
    rows = []
    for nice, results in runs.items():
        agents = [s for r in results for s in r["agent_s"]]
        direct = [s for r in results for s in r["direct_s"]]
        idle = summary([r["idle_ping_p95_ms"] for r in results])["p50"]
        busy = summary([r["burst_ping_p95_ms"] for r in results])["p50"]
        rows.append(
            [
                nice,
                f"{idle:.1f}",
                f"{busy:.1f}",
                f"{ratio(busy, idle):.2f}x",
                f"{summary([r['burst_wall_s'] for r in results])['p50']:.1f}",
                f"{percentile(agents, 50):.2f}",
                f"{percentile(direct, 50):.2f}",
                f"{ratio(percentile(agents, 50), percentile(direct, 50)):.2f}x",
            ]
        )
    print(
        f"{BURST}-agent burst (ping p95, p50 of {args.rounds} rounds); instant agent beside "
        f"{args.hogs} hogs ({args.samples} x {args.rounds} samples, p50)"
    )
    print_table(
        [
            "nice",
            "idle ping p95 ms",
            "burst ping p95 ms",
            "/ idle",
            "burst wall s",
            "agent s",
            "direct s",
            "agent / direct",
        ],
        rows,
    )
    write_results("nice", {"machine": machine_info(), "args": vars(args), "runs": runs})


if __name__ == "__main__":
    main()
