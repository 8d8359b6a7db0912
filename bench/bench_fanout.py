"""Fan-out: 100 demo agents that answer at once, through the daemon vs. spawned directly.

Daemon side (one real daemon, fresh temp home, reconcile interval 2 s = the default):
    C client threads, each on its own socket connection, share the 100 tasks "answer: <n>";
    each thread first starts its share, then for each of its agents calls `wait` (until
    terminal) and `answer`, and checks the answer text is exactly <n>.
    Wall time = first start sent -> last answer verified.

Baseline (same process, same machine, interleaved round by round):
    100 x `python -m agent_run.engines.demo_program --model demo-1` spawned directly with the
    environment a supervisor gives an engine (allowlist + HOME + PYTHONUNBUFFERED), each sent the
    stream-json user message {"type":"user","message":{"role":"user","content":"answer: <n>"}}
    on stdin, stdin closed; then each stdout read to EOF and its `result` line checked to be <n>.
    Wall time = first spawn -> last answer verified.

Rounds alternate baseline / daemon (order flipped each round) so drift hits both alike.
Besides wall time, CPU time is accounted: the daemon's own utime+stime and its reaped children's
(supervisors, which reap their engines), against this process's reaped children for the direct
run. On a 2-core box the CPU ratio is the less noisy of the two.

Run:  cd /work/main && uv run python bench/bench_fanout.py [--agents 100] [--rounds 5] [--clients 8]
      cd /work/main && uv run python bench/bench_fanout.py --pycache   (see _common.pycache_env)
"""

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
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
    wait_for,
    write_results,
    zygote_ready,
)

from agent_run.rpc.client import RawClient


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own utime+stime, reaped children's cutime+cstime) of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def children_of(pid: int) -> list[int]:
    """Its child processes, except the supervisors' fork server (which lives as long as it)."""
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                found += [int(x) for x in fh.read().split()]
        except OSError:
            pass
    return [child for child in found if not _is_zygote(child)]


def _is_zygote(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"agent_run.supervisor.zygote" in fh.read()
    except OSError:
        return False


def own_children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "TMPDIR")


def engine_env(engine_home: str) -> dict[str, str]:
    """What agent_run.engines.environment.base_environment gives the demo engine."""
    env = {k: os.environ[k] for k in PASSTHROUGH if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = engine_home
    env["PYTHONUNBUFFERED"] = "1"
    return env


def user_message(text: str) -> bytes:
    return (
        json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"
    ).encode()


def run_direct(
    n_agents: int, base: int, workdir: str, engine_home: str, argv: list[str] | None = None
) -> dict:
    """Spawn n demo engines at once (`argv`: the engine's, or a wrapper's around it), feed each
    its task, wait for all, verify the answers."""
    env = engine_env(engine_home)
    argv = argv or [sys.executable, "-m", "agent_run.engines.demo_program", "--model", "demo-1"]
    cpu0 = own_children_cpu()
    t0 = time.perf_counter()
    procs = []
    for i in range(n_agents):
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=workdir,
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        proc.stdin.write(user_message(f"answer: {base + i}"))
        proc.stdin.close()
        procs.append(proc)
    spawned = time.perf_counter() - t0
    ok = 0
    for i, proc in enumerate(procs):
        out = proc.stdout.read()
        proc.stdout.close()
        proc.wait()
        for line in out.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (
                obj.get("type") == "result"
                and not obj.get("is_error")
                and obj.get("result") == str(base + i)
            ):
                ok += 1
                break
    wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "all_spawned": spawned,
        "verified": ok,
        "children_cpu_seconds": own_children_cpu() - cpu0,
    }


def run_daemon(home, daemon_pid: int, n_agents: int, base: int, workdir: str, clients: int) -> dict:
    """n starts through `clients` connections at once; wait + answer for each; verify."""
    tasks = list(range(n_agents))
    shares = [tasks[k::clients] for k in range(clients)]
    start_lat: list[float] = []
    verified = Counter()
    errors: list[str] = []
    agent_ids: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    started_all = threading.Event()
    remaining = [clients]
    marks: dict[str, float] = {}

    def worker(share: list[int]) -> None:
        try:
            with RawClient(home.socket_path, timeout=180) as client:
                barrier.wait()
                mine = []
                for i in share:
                    t = time.perf_counter()
                    view = client.call("start", {"task": f"answer: {base + i}", "workdir": workdir})
                    with lock:
                        start_lat.append(time.perf_counter() - t)
                        agent_ids.append(view["id"])
                    mine.append((i, view["id"]))
                with lock:
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        marks["all_started"] = time.perf_counter()
                        started_all.set()
                for i, agent_id in mine:
                    result = client.call("wait", {"agent_id": agent_id, "timeout_seconds": 150})
                    state = result["agent"]["state"]
                    if state == "succeeded":
                        text = client.call("answer", {"agent_id": agent_id})["text"]
                        with lock:
                            verified["ok" if text.strip() == str(base + i) else "wrong"] += 1
                    else:
                        with lock:
                            verified[f"not_succeeded:{state}"] += 1
        except Exception as exc:  # report, do not hang the others
            with lock:
                errors.append(repr(exc))
            try:
                barrier.abort()
            except threading.BrokenBarrierError:
                pass

    threads = [threading.Thread(target=worker, args=(share,), daemon=True) for share in shares]
    for t in threads:
        t.start()
    own0, kids0 = proc_cpu(daemon_pid)
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join(timeout=200)
    wall = time.perf_counter() - t0
    # CPU accounting: supervisors are reaped by the daemon, engines by their supervisor, so the
    # daemon's cutime+cstime covers both once every supervisor has exited and been reaped.
    # Supervisors forked by the fork server are not the daemon's children (reparented at once):
    # their CPU is not counted here; run with AGENT_RUN_FORK_SERVER=0 for that figure.
    wait_for(lambda: not children_of(daemon_pid), timeout=60, what="supervisors to exit")
    time.sleep(0.2)
    own1, kids1 = proc_cpu(daemon_pid)
    rows = db_rows(
        home,
        "SELECT agent_id, state, failure_kind, failure_message, started_at, ended_at,"
        " created_at FROM executions",
    )
    mine = set(agent_ids)
    rows = [r for r in rows if r["agent_id"] in mine]
    states = Counter(r["state"] for r in rows)
    kinds = Counter(r["failure_kind"] for r in rows if r["failure_kind"])
    return {
        "wall": wall,
        "all_started": marks.get("all_started", float("nan")) - t0,
        "daemon_cpu_seconds": own1 - own0,
        "children_cpu_seconds": kids1 - kids0,
        "verified": verified["ok"],
        "verify_counts": dict(verified),
        "states": dict(states),
        "failure_kinds": dict(kinds),
        "errors": errors,
        "failure_messages": sorted(
            {(r["failure_message"] or "")[:300] for r in rows if r["failure_kind"]}
        ),
        "start_latency": start_lat,
        "admitted_to_ended_max": max(
            (r["ended_at"] - r["created_at"] for r in rows if r["ended_at"]), default=float("nan")
        ),
    }


@contextlib.contextmanager
def cleanup_dir(path):
    try:
        yield
    finally:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument(
        "--budget",
        type=float,
        default=60.0,
        help="start no new round after this many seconds (keeps the run under 3 min)",
    )
    ap.add_argument(
        "--pycache",
        action="store_true",
        help="private bytecode cache for the daemon and its supervisors",
    )
    args = ap.parse_args()
    name = "bench_fanout_pycache" if args.pycache else "bench_fanout"
    overrides, prefix = pycache_env(args.pycache)
    info = machine_info()
    t_begin = time.perf_counter()
    direct_runs, daemon_runs = [], []

    with (
        daemon_env(env=overrides) as (home, daemon, workdir),
        tempfile.TemporaryDirectory(prefix="arbe-") as ehome,
        cleanup_dir(prefix),
    ):
        # Warm-up: one agent through the daemon, one engine directly.
        daemon.call(
            "wait",
            {
                "agent_id": daemon.call("start", {"task": "answer: w", "workdir": str(workdir)})[
                    "id"
                ],
                "timeout_seconds": 60,
            },
        )
        run_direct(1, 0, str(workdir), ehome)
        if overrides.get("AGENT_RUN_FORK_SERVER", "1") != "0":  # the first start started it
            wait_for(lambda: zygote_ready(home), timeout=60, what="the fork server")
        for r in range(args.rounds):
            if r > 0 and time.perf_counter() - t_begin > args.budget:
                print(
                    f"time budget of {args.budget:.0f}s spent: stopping after {r} rounds",
                    flush=True,
                )
                break
            base = (r + 1) * 10_000
            order = ("direct", "daemon") if r % 2 == 0 else ("daemon", "direct")
            for which in order:
                if which == "direct":
                    res = run_direct(args.agents, base, str(workdir), ehome)
                    direct_runs.append(res)
                else:
                    res = run_daemon(
                        home, daemon.proc.pid, args.agents, base + 5000, str(workdir), args.clients
                    )
                    daemon_runs.append(res)
                print(
                    f"round {r + 1} {which:6s}: wall {res['wall']:.2f}s verified {res['verified']}/"
                    f"{args.agents}"
                    + (f" states {res['states']}" if which == "daemon" else "")
                    + f" cpu {res.get('children_cpu_seconds', 0) + res.get('daemon_cpu_seconds', 0):.1f}s",
                    flush=True,
                )
                # Let the machine settle (reap, WAL checkpoint) between measurements.
                time.sleep(1.0)

    total = time.perf_counter() - t_begin
    d_wall = [x["wall"] for x in daemon_runs]
    b_wall = [x["wall"] for x in direct_runs]
    per_round = [ratio(d, b) for d, b in zip(d_wall, b_wall, strict=True)]
    start_lat = [v for x in daemon_runs for v in x["start_latency"]]
    succeeded = [x["states"].get("succeeded", 0) for x in daemon_runs]
    d_cpu = [
        (x["daemon_cpu_seconds"] + x["children_cpu_seconds"]) / args.agents for x in daemon_runs
    ]
    b_cpu = [x["children_cpu_seconds"] / args.agents for x in direct_runs]
    s = {
        "daemon_wall": summary(d_wall),
        "direct_wall": summary(b_wall),
        "daemon_cpu_per_agent": summary(d_cpu),
        "daemon_process_cpu_per_agent": summary(
            [x["daemon_cpu_seconds"] / args.agents for x in daemon_runs]
        ),
        "direct_cpu_per_agent": summary(b_cpu),
        "daemon_all_started": summary([x["all_started"] for x in daemon_runs]),
        "direct_all_spawned": summary([x["all_spawned"] for x in direct_runs]),
        "daemon_start_latency_under_load": summary(start_lat),
        "ratio_per_round": summary(per_round),
    }

    print(
        f"\n{name}: {args.agents} agents x {len(daemon_runs)} rounds, {args.clients} client "
        f"connections, {total:.1f}s total, loadavg at start "
        f"{tuple(round(x, 2) for x in info['loadavg_at_start'])}"
    )
    print_table(
        ["measurement", "n", "p50 s", "p95 s", "min s", "max s"],
        [
            (k, v["n"], v["p50"], v["p95"], v["min"], v["max"])
            for k, v in s.items()
            if k != "ratio_per_round"
        ],
    )
    print()
    print_table(
        ["ratio", "value"],
        [
            ("daemon/direct wall, p50 of per-round ratios", s["ratio_per_round"]["p50"]),
            ("daemon/direct wall, max of per-round ratios", s["ratio_per_round"]["max"]),
            (
                "daemon p50 wall / direct p50 wall",
                ratio(s["daemon_wall"]["p50"], s["direct_wall"]["p50"]),
            ),
            (
                "CPU per agent, daemon path / direct (p50)",
                ratio(s["daemon_cpu_per_agent"]["p50"], s["direct_cpu_per_agent"]["p50"]),
            ),
        ],
    )
    print(
        f"\nsucceeded per daemon round: {succeeded} of {args.agents}; "
        f"answers verified per round: {[x['verified'] for x in daemon_runs]}; "
        f"failure kinds: {[x['failure_kinds'] for x in daemon_runs]}; "
        f"client errors: {sum(len(x['errors']) for x in daemon_runs)}"
    )
    for msg in sorted({m for x in daemon_runs for m in x["failure_messages"]}):
        print(f"  failure message: {msg}")
    print(f"direct answers verified per round: {[x['verified'] for x in direct_runs]}")

    path = write_results(
        name,
        {
            "benchmark": name,
            "bytecode_cache": args.pycache,
            "machine": info,
            "args": vars(args),
            "total_seconds": total,
            "seconds": s,
            "per_round_ratio": per_round,
            "succeeded_per_round": succeeded,
            "daemon_runs": daemon_runs,
            "direct_runs": direct_runs,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
