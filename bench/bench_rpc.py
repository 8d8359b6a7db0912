"""`start` round trip over the daemon socket, beside `ping` and a bare interpreter spawn.

A real daemon (tests.harness.DaemonProcess) in a fresh temp home, demo engine, task "answer: x",
reconcile interval 2 s (the default). The measurements are interleaved in one loop so that
machine noise hits them alike:

    for each of N rounds:
        bare spawn      subprocess.run([sys.executable, "-c", "pass"])
        import spawn    subprocess.run([sys.executable, "-c", "import agent_run.supervisor.run"])
                        (what a supervisor must import before it can report ready; context only)
        start           client.call("start", ...)                                 <- timed
        (wait for the agent to end through the `wait` tool, untimed for `start`; the
         start -> terminal time is recorded as well)
        ping x P        on the same persistent connection
        ping            on a fresh connection (what one CLI invocation pays for the socket)

Each start is also split into phases from wall-clock stamps: the client's send/receive times,
the row's created_at (admission) and started_at (supervisor ready), and the supervisor's fork
time from /proc start ticks (10 ms resolution):
    admit = created_at - send;  to_fork = fork - created_at;  fork_to_ready = started_at - fork;
    ready_to_reply = receive - started_at
Since `start` replies at admission and spawns in the background, ready_to_reply is negative
(the reply precedes the supervisor's readiness) and to_fork / fork_to_ready describe the
background spawn, not the reply.

Run:  cd /work/main && uv run python bench/bench_rpc.py [--rounds 40] [--pings-per-round 13]
      cd /work/main && uv run python bench/bench_rpc.py --pycache

--pycache gives the daemon, its supervisors and the baseline spawns a private bytecode cache
(see _common.pycache_env); results then go to results/bench_rpc_pycache.json.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter

from _common import (
    daemon_env,
    db_rows,
    machine_info,
    print_table,
    pycache_env,
    ratio,
    summary,
    write_results,
)

from agent_run.rpc.client import RawClient

SERIES = (
    "start",
    "ping",
    "ping_fresh_connection",
    "bare_spawn",
    "import_supervisor_spawn",
    "start_to_terminal",
)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


PHASES = ("admit", "to_fork", "fork_to_ready", "ready_to_reply")


def boot_wall_time() -> float:
    """Wall-clock time of boot, from /proc/uptime (10 ms resolution, unlike btime's 1 s)."""
    with open("/proc/uptime") as fh:
        uptime = float(fh.read().split()[0])
    return time.time() - uptime


def phases(home, stamps: list[tuple[str, float, float]], m: dict[str, list[float]]) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    boot = boot_wall_time()
    rows = {
        r["agent_id"]: r
        for r in db_rows(
            home, "SELECT agent_id, created_at, started_at, supervisor_start_ticks FROM executions"
        )
    }
    for agent_id, sent, received in stamps:
        row = rows.get(agent_id)
        if row is None or row["started_at"] is None or row["supervisor_start_ticks"] is None:
            continue
        fork = boot + row["supervisor_start_ticks"] / ticks
        m["admit"].append(row["created_at"] - sent)
        m["to_fork"].append(fork - row["created_at"])
        m["fork_to_ready"].append(row["started_at"] - fork)
        m["ready_to_reply"].append(received - row["started_at"])


def run(
    args: argparse.Namespace,
    overrides: dict[str, str],
    m: dict[str, list[float]],
    start_states: Counter,
    end_states: Counter,
) -> None:
    child_env = {**os.environ, **overrides}
    bare_argv = [sys.executable, "-c", "pass"]
    import_argv = [sys.executable, "-c", "import agent_run.supervisor.run"]
    with daemon_env(env=overrides) as (home, daemon, workdir):
        params = {"task": "answer: x", "workdir": str(workdir)}
        with daemon.client(timeout=60) as client:
            # Warm-up: page cache, the daemon's thread pool and its lazily made connections.
            for _ in range(args.warmup):
                subprocess.run(bare_argv, check=True, env=child_env)
                subprocess.run(import_argv, check=True, env=child_env)
                view = client.call("start", params)
                client.call("wait", {"agent_id": view["id"], "timeout_seconds": 60})
                for _ in range(20):
                    client.call("ping")

            def fresh_ping() -> None:
                with RawClient(home.socket_path, timeout=30) as c:
                    c.call("ping")

            stamps: list[tuple[str, float, float]] = []
            for _ in range(args.rounds):
                m["bare_spawn"].append(
                    timed(lambda: subprocess.run(bare_argv, check=True, env=child_env))
                )
                m["import_supervisor_spawn"].append(
                    timed(lambda: subprocess.run(import_argv, check=True, env=child_env))
                )

                sent, t0 = time.time(), time.perf_counter()
                view = client.call("start", params)
                m["start"].append(time.perf_counter() - t0)
                stamps.append((view["id"], sent, time.time()))
                start_states[view["state"]] += 1
                # Let it finish before the next round (and before teardown).
                result = client.call("wait", {"agent_id": view["id"], "timeout_seconds": 60})
                m["start_to_terminal"].append(time.perf_counter() - t0)
                end_states[result["agent"]["state"]] += 1

                for _ in range(args.pings_per_round):
                    m["ping"].append(timed(lambda: client.call("ping")))
                m["ping_fresh_connection"].append(timed(fresh_ping))
        phases(home, stamps, m)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--pings-per-round", type=int, default=13)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--pycache", action="store_true", help="private bytecode cache for all children"
    )
    args = ap.parse_args()
    name = "bench_rpc_pycache" if args.pycache else "bench_rpc"

    info = machine_info()
    m: dict[str, list[float]] = {k: [] for k in SERIES + PHASES}
    start_states: Counter = Counter()
    end_states: Counter = Counter()
    t_begin = time.perf_counter()
    overrides, prefix = pycache_env(args.pycache)
    try:
        run(args, overrides, m, start_states, end_states)
    finally:
        if prefix is not None:
            shutil.rmtree(prefix, ignore_errors=True)
    total = time.perf_counter() - t_begin

    s = {k: summary(v) for k, v in m.items() if v}
    ratios = {
        "start_over_ping_p50": ratio(s["start"]["p50"], s["ping"]["p50"]),
        "start_over_ping_p95": ratio(s["start"]["p95"], s["ping"]["p95"]),
        "start_over_bare_spawn_p50": ratio(s["start"]["p50"], s["bare_spawn"]["p50"]),
        "start_over_bare_spawn_p95": ratio(s["start"]["p95"], s["bare_spawn"]["p95"]),
        "start_over_import_spawn_p50": ratio(
            s["start"]["p50"], s["import_supervisor_spawn"]["p50"]
        ),
        "import_spawn_over_bare_spawn_p50": ratio(
            s["import_supervisor_spawn"]["p50"], s["bare_spawn"]["p50"]
        ),
    }

    print(
        f"\n{name}: {args.rounds} rounds, {total:.1f}s total, loadavg at start "
        f"{tuple(round(x, 2) for x in info['loadavg_at_start'])}, bytecode cache: {args.pycache}"
    )
    print_table(
        ["measurement", "n", "p50 ms", "p95 ms", "min ms", "max ms"],
        [
            (k, v["n"], v["p50"] * 1e3, v["p95"] * 1e3, v["min"] * 1e3, v["max"] * 1e3)
            for k, v in s.items()
            if k in SERIES
        ],
    )
    print("\nphases of start (wall-clock stamps; to_fork / fork_to_ready have 10 ms resolution)")
    print_table(
        ["phase", "n", "p50 ms", "p95 ms"],
        [(k, s[k]["n"], s[k]["p50"] * 1e3, s[k]["p95"] * 1e3) for k in PHASES if k in s],
    )
    print()
    print_table(["ratio", "value"], list(ratios.items()))
    print(f"\nstate returned by start: {dict(start_states)}; state at end: {dict(end_states)}")

    path = write_results(
        name,
        {
            "benchmark": name,
            "bytecode_cache": args.pycache,
            "machine": info,
            "args": vars(args),
            "total_seconds": total,
            "seconds": s,
            "ratios": ratios,
            "start_returned_states": dict(start_states),
            "end_states": dict(end_states),
            "raw_seconds": m,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
