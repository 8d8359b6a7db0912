"""The supervisors' fork server: before (AGENT_RUN_FORK_SERVER=0) and after (on), same run.

Daemons in fresh homes, measured interleaved: off, on (a user's daemon: a fresh `api serve`,
its zygote a fresh interpreter), with `--forked` also the tests' kind (a daemon forked from a
pre-imported process, which forks its zygote from itself at boot), with `--ref COMMIT` also a
user's daemon running that commit's src/ (a before/after of a change):
- `start` -> supervisor ready (identity recorded, `starting`: the row's `started_at`, written by
  the supervisor in that transaction) vs a bare `python -c pass` spawn;
- an instant demo agent (`answer: x`), `start` -> terminal (`ended_at`), and -> its `wait`
  returned (the client's view; the lag between the two is the daemon noticing), vs spawning the demo
  engine directly with the same input, bare and in the bubblewrap sandbox the supervisor runs
  it in (`bench_sandbox.sandboxed_demo_argv`: agent-run's own cost apart from the sandbox's);
- 100 demo agents started at once from 8 connections until all are terminal and every answer is
  verified, vs the same 100 engines spawned directly (bench_fanout's `run_direct`), bare and
  sandboxed; with the whole machine's CPU seconds over each (/proc/stat: the kernel's fork,
  exit and copy-on-write work included, which no process is charged for);
- supervisor PSS and RSS while 5 agents run.

    uv run python bench/bench_fork_server.py [--rounds 20] [--fanout-rounds 2] [--forked]
        [--ref COMMIT]
"""

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import (
    BENCH_CONFIG,
    daemon_env,
    db_rows,
    machine_info,
    memory_mib,
    print_table,
    ratio,
    ref_tree,
    source_state,
    summary,
    wait_all_terminal,
    wait_for,
    write_results,
    zygote_ready,
)
from bench_fanout import engine_env, run_direct, user_message
from bench_sandbox import sandboxed_demo_argv

from agent_run.rpc.client import RawClient

# off: every supervisor spawned as a fresh interpreter (AGENT_RUN_FORK_SERVER=0). on: a user's
# daemon (a fresh `api serve`), whose zygote is a fresh interpreter started with its first
# spawn. forked (--forked): the tests' daemons, forks of a pre-imported padded process, which
# fork their zygote from themselves at boot: it holds the whole daemon's memory.
MODE_DAEMONS = {
    "off": {"env": {"AGENT_RUN_FORK_SERVER": "0"}, "fresh": True},
    "on": {"env": {"AGENT_RUN_FORK_SERVER": "1"}, "fresh": True},
    "forked": {"env": {"AGENT_RUN_FORK_SERVER": "1"}, "fresh": False},
}  # ref (--ref COMMIT): as on, running that commit's src/


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (user, nice, system, irq)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    return busy / os.sysconf("SC_CLK_TCK")


def with_cpu(run, *args) -> dict:
    """`run(*args)` (a fanout: {"wall", "verified"}) with the machine's CPU seconds over it."""
    before = machine_cpu_seconds()
    result = run(*args)
    return {**result, "cpu": machine_cpu_seconds() - before}


def bare_spawn() -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t


def direct_engine(workdir: str, engine_home: str, argv: list[str] | None = None) -> float:
    """Spawn the demo engine (or `argv`, its sandboxed form) with `answer: x`, read until it
    exits."""
    argv = argv or [sys.executable, "-m", "agent_run.engines.demo_program", "--model", "demo-1"]
    t = time.perf_counter()
    proc = subprocess.run(
        argv,
        input=user_message("answer: x"),
        env=engine_env(engine_home),
        cwd=workdir,
        capture_output=True,
        check=True,
    )
    assert b'"result": "x"' in proc.stdout or b'"result":"x"' in proc.stdout, proc.stdout[-300:]
    return time.perf_counter() - t


def instant_agent(home, client: RawClient, workdir: str) -> tuple[float, float, float]:
    """(start -> ready, start -> terminal, start -> `wait` returned) of one `answer: x` agent,
    in seconds."""
    t0 = time.time()
    agent = client.call("start", {"task": "answer: x", "workdir": workdir})
    result = client.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    returned = time.time() - t0
    assert result["agent"]["state"] == "succeeded", result
    row = db_rows(
        home, "SELECT started_at, ended_at FROM executions WHERE agent_id = ?", (agent["id"],)
    )[0]
    return row["started_at"] - t0, row["ended_at"] - t0, returned


def fanout(home, workdir: str, n: int, base: int, clients: int = 8) -> dict:
    """n starts from `clients` connections at once; until all terminal and answers verified."""
    ids: dict[str, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def worker(share: list[int]) -> None:
        with RawClient(home.socket_path, timeout=180) as client:
            barrier.wait()
            for i in share:
                view = client.call("start", {"task": f"answer: {base + i}", "workdir": workdir})
                with lock:
                    ids[view["id"]] = base + i

    threads = [
        threading.Thread(target=worker, args=(list(range(n))[k::clients],)) for k in range(clients)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    states = wait_all_terminal(home, list(ids), timeout=180)
    verified = 0
    with RawClient(home.socket_path, timeout=60) as client:
        for agent_id, expected in ids.items():
            if states[agent_id] == "succeeded":
                verified += client.call("answer", {"agent_id": agent_id})["text"] == str(expected)
    return {"wall": time.perf_counter() - t0, "verified": verified}


def supervisor_memory(home, client: RawClient, workdir: str, agents: int = 5) -> list[float]:
    """PSS (MiB) of each supervisor while `agents` agents run at once, sampled mid-run."""
    ids = [
        client.call("start", {"task": "steps: 60\nstep_seconds: 0.05", "workdir": workdir})["id"]
        for _ in range(agents)
    ]

    def engines_running() -> list[int] | None:
        rows = db_rows(
            home,
            "SELECT supervisor_pid FROM executions WHERE engine_pid IS NOT NULL"
            " AND state = 'running'",
        )
        pids = [r[0] for r in rows]
        return pids if len(pids) >= agents else None

    pids = wait_for(engines_running, timeout=60, what="agents running")
    samples = [m for pid in pids if (m := memory_mib(pid)) is not None]
    wait_all_terminal(home, ids, timeout=120)
    return [pss for _rss, pss in samples], [rss for rss, _pss in samples]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fanout-rounds", type=int, default=2)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument(
        "--forked", action="store_true", help="also a daemon that forks its zygote at boot"
    )
    parser.add_argument(
        "--ref",
        help="also COMMIT's src/ as a user's daemon runs it (mode ref); implies --no-sandbox",
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help='sandbox = "none" for every daemon (a sandboxed engine could not import a ref tree)',
    )
    parser.add_argument(
        "--no-off",
        action="store_true",
        help="skip the spawn-only daemon (off): more rounds of on vs ref in the same time",
    )
    args = parser.parse_args()
    config = BENCH_CONFIG + ('sandbox = "none"\n' if args.no_sandbox or args.ref else "")
    modes = (
        *(() if args.no_off else ("off",)),
        "on",
        *(("forked",) if args.forked else ()),
        *(("ref",) if args.ref else ()),
    )
    load = os.getloadavg()
    m: dict[str, list[float]] = {k: [] for k in ("bare", "direct", "boxed")}
    for mode in modes:
        for measure in ("ready", "term", "returned", "lag"):
            m[f"{measure}_{mode}"] = []
    fan: dict[str, list[dict]] = {mode: [] for mode in ("direct", "boxed", *modes)}
    memory: dict[str, tuple[list[float], list[float]]] = {}
    with contextlib.ExitStack() as stack:
        daemons = dict(MODE_DAEMONS)
        if args.ref:  # the daemon, its zygote and its supervisors all run COMMIT's code
            ref_env = stack.enter_context(ref_tree(args.ref))
            daemons["ref"] = {"env": {**daemons["on"]["env"], **ref_env}, "fresh": True}
        homes = {}
        for mode in modes:
            homes[mode], _daemon, workdir = stack.enter_context(daemon_env(config, **daemons[mode]))
        engine_home = str(Path(workdir) / "engine-home")
        os.makedirs(engine_home, exist_ok=True)
        box = Path(workdir) / "sandbox-scratch"
        box.mkdir(exist_ok=True)
        # The agents' engines run in bubblewrap: the same engine in the same sandbox, spawned
        # directly, separates agent-run's own cost from the sandbox's.
        boxed = sandboxed_demo_argv(Path(workdir), Path(engine_home), engine_env(engine_home), box)
        clients = {mode: RawClient(homes[mode].socket_path, timeout=120) for mode in modes}
        for mode in modes:  # warm up: the first agent of a home opens files nobody had yet,
            instant_agent(homes[mode], clients[mode], str(workdir))  # and starts the zygote
        for mode in modes:
            if mode == "off":  # spawns only: no zygote
                continue
            home = homes[mode]
            wait_for(lambda home=home: zygote_ready(home), timeout=60, what="the zygote")
        for _ in range(args.rounds):
            m["bare"].append(bare_spawn())
            m["direct"].append(direct_engine(str(workdir), engine_home))
            m["boxed"].append(direct_engine(str(workdir), engine_home, boxed))
            for mode in modes:
                ready, terminal, returned = instant_agent(homes[mode], clients[mode], str(workdir))
                m[f"ready_{mode}"].append(ready)
                m[f"term_{mode}"].append(terminal)
                m[f"returned_{mode}"].append(returned)
                m[f"lag_{mode}"].append(returned - terminal)  # the end to the client knowing it
        for mode in modes:
            memory[mode] = supervisor_memory(homes[mode], clients[mode], str(workdir))
        for r in range(args.fanout_rounds):
            base = 10_000 * (r + 1)
            fan["direct"].append(with_cpu(run_direct, args.agents, base, str(workdir), engine_home))
            fan["boxed"].append(
                with_cpu(run_direct, args.agents, base, str(workdir), engine_home, boxed)
            )
            for mode in modes:
                fan[mode].append(with_cpu(fanout, homes[mode], str(workdir), args.agents, base))
        for client in clients.values():
            client.close()
    s = {k: summary(v) for k, v in m.items()}
    fan_p50 = {k: summary([x["wall"] for x in v])["p50"] for k, v in fan.items()}
    mem = {k: {"pss": summary(v[0]), "rss": summary(v[1])} for k, v in memory.items()}
    rows = [
        ["bare `python -c pass`", s["bare"]["p50"] * 1e3, "", ""],
        ["direct demo engine, answer: x", s["direct"]["p50"] * 1e3, "", ""],
        ["direct demo engine in its sandbox", s["boxed"]["p50"] * 1e3, "", ""],
    ]
    for mode in modes:
        rows.append(
            [
                f"start->ready ({mode})",
                s[f"ready_{mode}"]["p50"] * 1e3,
                ratio(s[f"ready_{mode}"]["p50"], s["bare"]["p50"]),
                "x bare",
            ]
        )
    for mode in modes:
        rows.append(
            [
                f"start->terminal ({mode})",
                s[f"term_{mode}"]["p50"] * 1e3,
                ratio(s[f"term_{mode}"]["p50"], s["direct"]["p50"]),
                f"x direct ({ratio(s[f'term_{mode}']['p50'], s['boxed']['p50']):.2f}x sandboxed)",
            ]
        )
    for mode in modes:
        rows.append(
            [
                f"start->wait returned ({mode}), lag p50 {s[f'lag_{mode}']['p50'] * 1e3:.1f} ms",
                s[f"returned_{mode}"]["p50"] * 1e3,
                ratio(s[f"returned_{mode}"]["p50"], s["direct"]["p50"]),
                "x direct",
            ]
        )
    # Each round's wall over the direct spawns of the same round (the machine's speed then).
    paired = {
        mode: summary(
            [x["wall"] / d["wall"] for x, d in zip(fan[mode], fan["direct"], strict=True)]
        )["p50"]
        for mode in ("boxed", *modes)
    }
    for mode in ("direct", "boxed", *modes):
        verified = [x["verified"] for x in fan[mode]]
        cpu_ms = summary([x["cpu"] / args.agents for x in fan[mode]])["p50"] * 1e3
        per_round = f"; per round {paired[mode]:.2f}x" if mode in paired else ""
        rows.append(
            [
                f"{args.agents} agents ({mode}), verified {verified}, {cpu_ms:.0f} CPU-ms each",
                fan_p50[mode] * 1e3,
                ratio(fan_p50[mode], fan_p50["direct"]),
                f"x direct ({ratio(fan_p50[mode], fan_p50['boxed']):.2f}x sandboxed{per_round})",
            ]
        )
    for mode in modes:
        rows.append(
            [
                f"supervisor PSS MiB ({mode}), RSS {mem[mode]['rss']['p50']:.1f}",
                mem[mode]["pss"]["p50"],
                "",
                "",
            ]
        )
    print(f"load average at start: {load}")
    print_table(["measure", "p50 ms (MiB)", "ratio", ""], rows)
    write_results(
        "fork_server",
        {
            "load_average": load,
            "machine": machine_info(),
            "source": source_state(),
            "summaries": s,
            "fanout": fan,
            "fanout_p50": fan_p50,
            "fanout_per_round_over_direct_p50": paired,
            "memory": mem,
            "raw": m,
        },
    )


if __name__ == "__main__":
    main()
