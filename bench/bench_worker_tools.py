"""Start-up of the per-agent worker-tools MCP server: spawn to the first `tools/list` answer,
and its memory once ready, beside a bare interpreter and the SDK-based server it replaced.

    bare          `python -c "import sys; sys.stdin.read()"`: spawn until it is running
                  (a first line on stdout), then its VmRSS / PSS
    current       `python -m agent_run.worker_tools` of this tree (stdlib JSON-RPC loop):
                  spawn, write initialize + notifications/initialized + tools/list, read until
                  the tools/list answer; memory sampled right then, while it waits on stdin
    ref           the same of --ref COMMIT's src/ (default: the last commit with the `mcp` SDK
                  server), through PYTHONPATH; the per-sample `python -c "import mcp.server"`
                  spawn is measured too, for context
All interleaved in one loop, first pass discarded. Each server gets a real, migrated
state.db in a temp home (tools/list does not read it).

Run:  uv run python bench/bench_worker_tools.py [--samples 15] [--ref 8924acf] [--pycache]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from _common import (
    machine_info,
    make_home,
    memory_mib,
    print_table,
    pycache_env,
    ratio,
    ref_tree,
    remove_home,
    summary,
    write_results,
)

SDK_SERVER_COMMIT = "8924acf"  # main before the stdlib server: worker_tools imported the mcp SDK
HANDSHAKE = b"".join(
    json.dumps(m).encode() + b"\n"
    for m in (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
)
BARE = "import sys; print('ready', flush=True); sys.stdin.read()"


def ready_sample(
    argv: list[str], env: dict[str, str], stdin: bytes, ready: bytes
) -> tuple[float, float, float]:
    """(seconds from spawn to a stdout line containing `ready`, RSS MiB, PSS MiB then)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdin and proc.stdout
        proc.stdin.write(stdin)
        proc.stdin.flush()
        for line in proc.stdout:
            if ready in line:
                break
        else:
            raise RuntimeError(f"{argv} exited before answering")
        wall = time.perf_counter() - t0
        rss, pss = memory_mib(proc.pid) or (float("nan"), float("nan"))
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=30)
    return wall, rss, pss


def spawn_wall(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--ref", default=SDK_SERVER_COMMIT)
    ap.add_argument(
        "--pycache", action="store_true", help="children reuse bytecode from a private cache"
    )
    args = ap.parse_args()
    info = machine_info()
    extra, _prefix = pycache_env(args.pycache)
    home = make_home()
    try:
        from agent_run.store.db import connect

        connect(home.root / "state.db").close()
        base = {
            **os.environ,
            **extra,
            "AGENT_RUN_HOME": str(home.root),
            "AGENT_RUN_EXECUTION_ID": "ex_bench",
            "AGENT_RUN_WORKER_TOKEN": "t",
            "AGENT_RUN_WORKER_TOOLS": "finish,create_commit",
        }
        with ref_tree(args.ref) as ref:
            trees = {"current": base, f"ref {args.ref}": {**base, **(ref or {})}}
            samples = run(args.samples, trees, base)
    finally:
        remove_home(home)
    report(info, args, samples)


def run(
    n: int, trees: dict[str, dict[str, str]], base: dict[str, str]
) -> dict[str, list[tuple[float, ...]]]:
    server = [sys.executable, "-m", "agent_run.worker_tools"]
    samples: dict[str, list[tuple[float, ...]]] = {
        k: [] for k in ("bare", "pass", "import mcp.server", *trees)
    }
    for i in range(n + 1):  # the first pass is a warm-up, discarded
        got = {
            "bare": ready_sample([sys.executable, "-c", BARE], base, b"", b"ready"),
            "pass": (spawn_wall([sys.executable, "-c", "pass"], base),),
            "import mcp.server": (spawn_wall([sys.executable, "-c", "import mcp.server"], base),),
        }
        for tree, env in trees.items():
            got[tree] = ready_sample(server, env, HANDSHAKE, b'"id":2')
        if i:
            for k, v in got.items():
                samples[k].append(v)
    return samples


def report(
    info: dict, args: argparse.Namespace, samples: dict[str, list[tuple[float, ...]]]
) -> None:
    bare = summary([s[0] for s in samples["bare"]])
    bare_pss = summary([s[2] for s in samples["bare"]])
    results, rows = {}, []
    for key, values in samples.items():
        wall = summary([v[0] for v in values])
        entry = {"wall_s": wall, "wall_over_bare_p50": ratio(wall["p50"], bare["p50"])}
        row = [key, wall["p50"] * 1e3, wall["p95"] * 1e3, ratio(wall["p50"], bare["p50"])]
        if len(values[0]) == 3:
            rss, pss = summary([v[1] for v in values]), summary([v[2] for v in values])
            entry.update(
                rss_mib=rss,
                pss_mib=pss,
                pss_over_bare_p50=ratio(pss["p50"], bare_pss["p50"]),
                extra_pss_mib_p50=pss["p50"] - bare_pss["p50"],
            )
            row += [rss["p50"], pss["p50"], pss["p50"] - bare_pss["p50"]]
        else:
            row += ["-", "-", "-"]
        results[key] = entry
        rows.append(row)
    cur, ref = results["current"], results[f"ref {args.ref}"]
    before_after = {
        "wall_p50_ref_over_current": ratio(ref["wall_s"]["p50"], cur["wall_s"]["p50"]),
        "pss_p50_ref_over_current": ratio(ref["pss_mib"]["p50"], cur["pss_mib"]["p50"]),
    }
    print(
        f"\nbench_worker_tools: {args.samples} samples, pycache={args.pycache}, loadavg at start "
        f"{tuple(round(x, 2) for x in info['loadavg_at_start'])}"
    )
    print_table(
        ["process", "ready p50 ms", "ready p95 ms", "/bare", "RSS MiB", "PSS MiB", "PSS-bare MiB"],
        rows,
    )
    print(
        f"\nbefore -> after: start {before_after['wall_p50_ref_over_current']:.2f}x faster, "
        f"PSS {before_after['pss_p50_ref_over_current']:.2f}x smaller"
    )
    path = write_results(
        "bench_worker_tools_pycache" if args.pycache else "bench_worker_tools",
        {
            "benchmark": "bench_worker_tools",
            "machine": info,
            "args": vars(args),
            "results": results,
            "before_over_after": before_after,
            "raw": samples,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
