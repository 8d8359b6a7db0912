"""Resident memory of a supervisor while its demo agent runs, and of the idle daemon,
beside a bare sleeping interpreter.

    baseline      `python -c "import time; time.sleep(30)"` (same interpreter, same environment)
    floor         `python -c "import agent_run.supervisor.run, time; time.sleep(30)"`: what a
                  supervisor imports, nothing run (context: import cost vs. runtime cost)
    daemon idle   the real daemon (fresh temp home, reconcile 2 s), before any agent and again
                  after all agents ended
    supervisor    one agent at a time, task "steps: 100\\nstep_seconds: 0.05\\nanswer: x" (~5 s);
                  its supervisor pid read from the `executions` table (harness db_rows), sampled
                  every SAMPLE_S while the execution is `running`
    engine        the demo engine process of the same execution, sampled alike (context)

Memory: VmRSS from /proc/PID/status and Pss from /proc/PID/smaps_rollup, in MiB. PSS splits
shared pages among the processes that map them, so it depends on what else runs; RSS does not.
CPU is also read (utime+stime from /proc/PID/stat) to give each process's CPU share while idle
or streaming.

Run:  cd /work/main && uv run python bench/bench_memory.py [--agents 4] [--baseline-samples 40]
"""

import argparse
import os
import signal
import subprocess
import sys
import time

from _common import (
    daemon_env,
    db_rows,
    machine_info,
    memory_mib,
    print_table,
    ratio,
    summary,
    wait_for,
    write_results,
)

SAMPLE_S = 0.1
TASK = "steps: 100\nstep_seconds: 0.05\nanswer: x"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def sample_process(pid: int, n: int, interval: float = SAMPLE_S) -> dict[str, list[float]]:
    rss, pss = [], []
    for _ in range(n):
        m = memory_mib(pid)
        if m is None:
            break
        rss.append(m[0])
        pss.append(m[1])
        time.sleep(interval)
    return {"rss": rss, "pss": pss}


def reference_process(code: str, samples: int) -> dict[str, object]:
    """Spawn `python -c code`, let it settle, sample it, kill it."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # past start-up
        wait_for(lambda: memory_mib(proc.pid) is not None, timeout=10, what="reference process")
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        data = sample_process(proc.pid, samples)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        return {**data, "cpu_share": ((c1 or 0) - (c0 or 0)) / (t1 - t0), "cpu_total": c1}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def recorded_pid(home, agent_id: str, column: str) -> int:
    """The execution's `supervisor_pid` or `engine_pid`, once recorded."""
    return wait_for(
        lambda: db_rows(home, f"SELECT {column} FROM executions WHERE agent_id = ?", (agent_id,))[
            0
        ][column],
        timeout=30,
        what=column,
    )


def run_agents(
    home, daemon, workdir, n_agents: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], list]:
    sup = {"rss": [], "pss": []}
    eng = {"rss": [], "pss": []}
    per_agent = []
    with daemon.client(timeout=60) as client:
        for _ in range(n_agents):
            view = client.call("start", {"task": TASK, "workdir": str(workdir)})
            agent_id = view["id"]
            # `start` answers at admission: the supervisor records its pid a moment later.
            sup_pid = recorded_pid(home, agent_id, "supervisor_pid")
            sup_cpu_ready = cpu_seconds(sup_pid)
            engine_pid = recorded_pid(home, agent_id, "engine_pid")
            wait_for(
                lambda a=agent_id: (
                    db_rows(home, "SELECT state FROM executions WHERE agent_id = ?", (a,))[0][
                        "state"
                    ]
                    != "starting"
                ),
                timeout=30,
                what="running",
            )
            c0, t0 = cpu_seconds(sup_pid), time.monotonic()
            e0 = cpu_seconds(engine_pid)
            a_sup = {"rss": [], "pss": []}
            c1 = e1 = None
            t1 = t0
            while True:
                state = db_rows(
                    home, "SELECT state FROM executions WHERE agent_id = ?", (agent_id,)
                )[0]["state"]
                if state != "running":
                    break
                ms, me = memory_mib(sup_pid), memory_mib(engine_pid)
                if ms is None or me is None:
                    break
                cs, ce = cpu_seconds(sup_pid), cpu_seconds(engine_pid)
                if cs is not None and ce is not None:
                    c1, e1, t1 = cs, ce, time.monotonic()
                a_sup["rss"].append(ms[0])
                a_sup["pss"].append(ms[1])
                eng["rss"].append(me[0])
                eng["pss"].append(me[1])
                time.sleep(SAMPLE_S)
            result = client.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
            sup["rss"] += a_sup["rss"]
            sup["pss"] += a_sup["pss"]
            span = max(t1 - t0, 1e-9)
            per_agent.append(
                {
                    "agent_id": agent_id,
                    "supervisor_pid": sup_pid,
                    "engine_pid": engine_pid,
                    "state": result["agent"]["state"],
                    "samples": len(a_sup["rss"]),
                    "supervisor_cpu_at_ready": sup_cpu_ready,
                    "supervisor_cpu_share_running": ((c1 or c0) - c0) / span,
                    "engine_cpu_share_running": ((e1 or e0) - e0) / span,
                    "supervisor_rss_max": max(a_sup["rss"], default=float("nan")),
                }
            )
    return sup, eng, per_agent


def daemon_idle(pid: int, samples: int) -> dict[str, object]:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    data = sample_process(pid, samples)
    c1, t1 = cpu_seconds(pid), time.monotonic()
    return {**data, "cpu_share": (c1 - c0) / (t1 - t0), "threads": thread_count(pid)}


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--baseline-samples", type=int, default=40)
    args = ap.parse_args()
    info = machine_info()
    t_begin = time.perf_counter()

    bare = reference_process("import time; time.sleep(30)", args.baseline_samples)
    floor = reference_process(
        "import agent_run.supervisor.run, time; time.sleep(30)", args.baseline_samples
    )
    with daemon_env() as (home, daemon, workdir):
        dpid = daemon.proc.pid
        time.sleep(2.5)  # one reconcile pass and the watcher running, nothing else
        idle_fresh = daemon_idle(dpid, args.baseline_samples)
        sup, eng, per_agent = run_agents(home, daemon, workdir, args.agents)
        time.sleep(1.0)
        idle_after = daemon_idle(dpid, args.baseline_samples)
    bare_after = reference_process("import time; time.sleep(30)", args.baseline_samples)
    total = time.perf_counter() - t_begin

    base_rss = bare["rss"] + bare_after["rss"]
    base_pss = bare["pss"] + bare_after["pss"]
    series = {
        "bare_python_sleep": (base_rss, base_pss),
        "import_floor_sleep": (floor["rss"], floor["pss"]),
        "daemon_idle_fresh": (idle_fresh["rss"], idle_fresh["pss"]),
        "daemon_idle_after_agents": (idle_after["rss"], idle_after["pss"]),
        "supervisor_running": (sup["rss"], sup["pss"]),
        "demo_engine_running": (eng["rss"], eng["pss"]),
    }
    s = {k: {"rss_mib": summary(r), "pss_mib": summary(p)} for k, (r, p) in series.items()}
    b_rss, b_pss = (
        s["bare_python_sleep"]["rss_mib"]["p50"],
        s["bare_python_sleep"]["pss_mib"]["p50"],
    )
    rows = []
    for k, v in s.items():
        rows.append(
            (
                k,
                v["rss_mib"]["n"],
                v["rss_mib"]["p50"],
                v["rss_mib"]["p95"],
                v["pss_mib"]["p50"],
                v["pss_mib"]["p95"],
                ratio(v["rss_mib"]["p50"], b_rss),
                ratio(v["pss_mib"]["p50"], b_pss),
            )
        )
    cpu = {
        "bare_python_sleep_cpu_share": bare["cpu_share"],
        "daemon_idle_fresh_cpu_share": idle_fresh["cpu_share"],
        "daemon_idle_after_cpu_share": idle_after["cpu_share"],
        "supervisor_cpu_share_running_p50": summary(
            [a["supervisor_cpu_share_running"] for a in per_agent]
        )["p50"],
        "engine_cpu_share_running_p50": summary([a["engine_cpu_share_running"] for a in per_agent])[
            "p50"
        ],
        "supervisor_cpu_seconds_at_ready_p50": summary(
            [a["supervisor_cpu_at_ready"] for a in per_agent]
        )["p50"],
        "import_floor_cpu_seconds": floor["cpu_total"],
        "bare_python_cpu_seconds": bare["cpu_total"],
        "daemon_threads_fresh": idle_fresh["threads"],
        "daemon_threads_after": idle_after["threads"],
    }

    print(
        f"\nbench_memory: {args.agents} agents, {total:.1f}s total, loadavg at start "
        f"{tuple(round(x, 2) for x in info['loadavg_at_start'])}"
    )
    print_table(
        [
            "process",
            "n",
            "RSS p50 MiB",
            "RSS p95",
            "PSS p50 MiB",
            "PSS p95",
            "RSS/bare",
            "PSS/bare",
        ],
        rows,
    )
    print()
    print_table(["cpu / threads", "value"], [(k, v) for k, v in cpu.items()])
    print(f"\nagent end states: {[a['state'] for a in per_agent]}")

    path = write_results(
        "bench_memory",
        {
            "benchmark": "bench_memory",
            "machine": info,
            "args": vars(args),
            "total_seconds": total,
            "mib": s,
            "cpu": cpu,
            "per_agent": per_agent,
            "raw_mib": {k: {"rss": r, "pss": p} for k, (r, p) in series.items()},
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
