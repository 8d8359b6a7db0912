"""Burst: N `start`s at once against a real daemon; how soon each `start` replies, and how reads
(`agent`, `list_agents`, `ping`) fare while the spawns and the agents run.

Daemon: one real daemon in a fresh temp home (reconcile interval 2 s = the default), demo engine.

Baseline (same run, same daemon, before the burst): a probe process cycles `ping`, `agent` (of a
warm-up agent) and `list_agents` (first page of 50), each on its own persistent connection, one
call every PROBE_GAP seconds, for BASELINE_SECONDS on the idle daemon.

Burst: N requests `start {task: "answer: burst <i>", request_id}` written at once over C
connections from one asyncio loop (each line is its own task in the daemon). Start latency =
reply received - line sent. The same probe process runs from the first start sent until every
agent is terminal ("during the burst"). Then every agent is checked: state `succeeded` and
`answer` exactly "burst <i>".

Ratios: each read's p95 during the burst over its p95 on the idle daemon; start p95 over idle
ping p95.

Run:  uv run python bench/bench_burst.py [--agents 500] [--connections 50]
"""

import argparse
import asyncio
import itertools
import json
import multiprocessing
import time
from collections import Counter
from typing import Any

from _common import (
    daemon_env,
    db_rows,
    machine_info,
    print_table,
    ratio,
    summary,
    wait_all_terminal,
    write_results,
)

from agent_run.rpc.client import RawClient

PROBE_GAP = 0.02
BASELINE_SECONDS = 4.0
PROBES = ("ping", "agent", "list_agents")


def probe(socket_path: str, agent_id: str, stop: Any, out: Any) -> None:
    """Child process: time each read, back to back with PROBE_GAP between, until `stop` is set."""
    params = {"ping": {}, "agent": {"agent_id": agent_id}, "list_agents": {"limit": 50}}
    clients = {m: RawClient(socket_path, timeout=300) for m in PROBES}
    samples: list[tuple[float, str, float]] = []
    for method in itertools.cycle(PROBES):
        if stop.is_set():
            break
        began = time.perf_counter()
        try:
            clients[method].call(method, params[method])
        except Exception as exc:  # the daemon went away: report what was measured
            samples.append((time.time(), f"error: {exc!r}", 0.0))
            break
        samples.append((time.time(), method, (time.perf_counter() - began) * 1000))
        time.sleep(PROBE_GAP)
    out.send(samples)


def run_probe(socket_path: str, agent_id: str) -> tuple[Any, Any, Any]:
    ctx = multiprocessing.get_context("fork")
    stop, (recv, send) = ctx.Event(), ctx.Pipe(duplex=False)
    proc = ctx.Process(target=probe, args=(socket_path, agent_id, stop, send), daemon=True)
    proc.start()
    return proc, stop, recv


def finish_probe(handle: tuple[Any, Any, Any]) -> list[tuple[float, str, float]]:
    proc, stop, recv = handle
    stop.set()
    samples = recv.recv()
    proc.join(timeout=30)
    return samples


def by_method(samples: list[tuple[float, str, float]]) -> dict[str, list[float]]:
    return {m: [ms for _t, method, ms in samples if method == m] for m in PROBES}


async def burst(socket_path: str, n: int, connections: int, workdir: str) -> dict[str, Any]:
    """Send n starts at once over `connections` connections; latency of each reply."""
    conns = [
        await asyncio.open_unix_connection(socket_path, limit=1 << 24) for _ in range(connections)
    ]
    sent: dict[int, float] = {}
    replies: dict[int, tuple[float, dict[str, Any]]] = {}

    async def read_replies(reader: asyncio.StreamReader, expected: int) -> None:
        for _ in range(expected):
            line = await reader.readline()
            if not line:
                return
            reply = json.loads(line)
            replies[reply["id"]] = (time.perf_counter(), reply)

    shares = [list(range(k, n, connections)) for k in range(connections)]
    readers = [
        asyncio.create_task(read_replies(r, len(share)))
        for (r, _w), share in zip(conns, shares, strict=True)
    ]
    began = time.time()
    for (_r, writer), share in zip(conns, shares, strict=True):
        for i in share:
            line = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "start",
                "params": {
                    "task": f"answer: burst {i}",
                    "workdir": workdir,
                    "request_id": f"burst-{i}",
                },
            }
            sent[i] = time.perf_counter()
            writer.write(json.dumps(line).encode() + b"\n")
    await asyncio.gather(*(w.drain() for _r, w in conns))
    await asyncio.wait_for(asyncio.gather(*readers), timeout=170)
    for _r, writer in conns:
        writer.close()
    latency = [(replies[i][0] - sent[i]) * 1000 for i in replies]
    errors = [r["error"] for _t, r in replies.values() if "error" in r]
    ids = {i: r["result"]["id"] for i, (_t, r) in replies.items() if "result" in r}
    states = Counter(r["result"]["state"] for _t, r in replies.values() if "result" in r)
    return {
        "began": began,
        "all_replied": max(t for t, _r in replies.values()) - min(sent.values()),
        "latency_ms": latency,
        "errors": errors[:5],
        "error_count": len(errors),
        "ids": ids,
        "reply_states": dict(states),
    }


def verify(home: Any, socket_path: str, ids: dict[int, str]) -> dict[str, Any]:
    rows = db_rows(home, "SELECT agent_id, state, failure_kind FROM executions")
    state = {r["agent_id"]: r["state"] for r in rows}
    kinds = Counter(
        r["failure_kind"] for r in rows if r["failure_kind"] and r["agent_id"] in ids.values()
    )
    verified = 0
    with RawClient(socket_path, timeout=60) as client:
        for i, agent_id in ids.items():
            if (
                state.get(agent_id) == "succeeded"
                and client.call("answer", {"agent_id": agent_id})["text"] == f"burst {i}"
            ):
                verified += 1
    return {
        "verified": verified,
        "states": dict(Counter(state[a] for a in ids.values())),
        "failure_kinds": dict(kinds),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument(
        "--end-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for every agent to end (the run is CPU-bound: ~2 min idle)",
    )
    args = ap.parse_args()
    info = machine_info()
    t0 = time.perf_counter()
    with daemon_env() as (home, daemon, workdir):
        socket_path = str(home.socket_path)
        warm = daemon.call("start", {"task": "answer: warm", "workdir": str(workdir)})["id"]
        daemon.call("wait", {"agent_id": warm, "timeout_seconds": 60})
        handle = run_probe(socket_path, warm)
        time.sleep(BASELINE_SECONDS)  # the idle daemon, probed
        idle = by_method(finish_probe(handle))
        handle = run_probe(socket_path, warm)
        result = asyncio.run(burst(socket_path, args.agents, args.connections, str(workdir)))
        replied = time.perf_counter()
        wait_all_terminal(home, list(result["ids"].values()), timeout=args.end_timeout)
        all_ended = time.perf_counter()
        during = by_method(finish_probe(handle))
        checked = verify(home, socket_path, result["ids"])
    total = time.perf_counter() - t0
    s = {
        "start_ms": summary(result["latency_ms"]),
        **{f"idle_{m}_ms": summary(v) for m, v in idle.items()},
        **{f"burst_{m}_ms": summary(v) for m, v in during.items()},
    }
    print(
        f"\nbench_burst: {args.agents} starts over {args.connections} connections, {total:.1f}s total, "
        f"loadavg at start {tuple(round(x, 2) for x in info['loadavg_at_start'])}"
    )
    print_table(
        ["measurement", "n", "p50 ms", "p95 ms", "max ms"],
        [(k, v["n"], v["p50"], v["p95"], v["max"]) for k, v in s.items()],
    )
    ratios = {
        f"{m} p95 burst / idle": ratio(s[f"burst_{m}_ms"]["p95"], s[f"idle_{m}_ms"]["p95"])
        for m in PROBES
    }
    ratios["start p95 / idle ping p95"] = ratio(s["start_ms"]["p95"], s["idle_ping_ms"]["p95"])
    print()
    print_table(["ratio", "value"], list(ratios.items()))
    ended_after = all_ended - replied
    print(
        f"\nall {args.agents} starts replied {result['all_replied']:.2f}s after the first was sent; "
        f"every agent terminal {ended_after:.1f}s after that. Replies' states: {result['reply_states']}; "
        f"start errors: {result['error_count']} {result['errors']}"
    )
    print(
        f"verified succeeded with the right answer: {checked['verified']}/{args.agents}; "
        f"states {checked['states']}; failure kinds {checked['failure_kinds']}"
    )
    path = write_results(
        "bench_burst",
        {
            "benchmark": "bench_burst",
            "machine": info,
            "args": vars(args),
            "total_seconds": total,
            "ms": s,
            "ratios": ratios,
            "all_replied_seconds": result["all_replied"],
            "terminal_after_replies_seconds": ended_after,
            "verify": checked,
            "start_errors": result["error_count"],
            "reply_states": result["reply_states"],
            "samples": {"start_ms": result["latency_ms"], "idle": idle, "burst": during},
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
