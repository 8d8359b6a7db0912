"""Where a forked supervisor's private memory is: the pages it no longer shares with its zygote.

A supervisor forked from the zygote shares every page it only reads; each page it writes is
copied (copy-on-write) and becomes its own. Its USS (private clean + dirty) is what one more
running agent adds. This bench starts `--agents` long demo agents on a user's daemon
(`sandbox = "none"`, fork server on) and splits each supervisor's private KiB by mapping
(`/proc/PID/smaps`):

    heap            glibc's main arena: objects over 512 bytes (most code objects), SQLite
    arenas          the other anonymous mappings: pymalloc's 1 MiB arenas (objects up to 512
                    bytes; the kernel merges adjacent ones into one mapping) and glibc's blocks
                    of 128 KiB and more
    thread stacks   8 MiB anonymous mappings, one per thread besides the main one
    thread heaps    glibc's per-thread arenas (64 MiB-aligned, starting at 132 KiB)
    libpython data  libpython's writable data: its static objects (types, small ints), whose
                    reference counts every supervisor writes
    other files     every other file mapping

Baseline, measured in the same run: a fork of this bench's own process after it imported what
the zygote preloads and froze the collector (the zygote's layout), which only sleeps: what a
fork costs before the supervisor runs anything.

Run:  uv run python bench/bench_supervisor_pages.py [--agents 5] [--rounds 2]
"""

import argparse
import collections
import gc
import importlib
import os
import time

from _common import (
    BENCH_CONFIG,
    daemon_env,
    machine_info,
    print_table,
    summary,
    wait_all_terminal,
    wait_for,
    write_results,
    zygote_ready,
)
from bench_worker_gate import LONG_TASK, running_rows

from agent_run.rpc.client import RawClient

KINDS = (
    "heap",
    "arenas",
    "thread stacks",
    "thread heaps",
    "libpython data",
    "other files",
)
MIB = 1024 * 1024


def _kind(path: str, perms: str, start: int, size: int) -> str:
    if path == "[heap]":
        return "heap"
    if path == "":
        if size == 8 * MIB:
            return "thread stacks"
        if start % (64 * MIB) == 0:  # glibc aligns each thread arena to its 64 MiB maximum
            return "thread heaps"
        return "arenas"
    if "libpython" in path and "w" in perms:
        return "libpython data"
    return "other files"


def private_by_kind(pid: int) -> dict[str, int]:
    """Private KiB (clean + dirty) of each mapping kind of `pid`."""
    found: collections.Counter[str] = collections.Counter()
    kind = "other files"
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            fields = line.split()
            if not line[0].isupper() and "-" in fields[0]:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                path = fields[5] if len(fields) > 5 else ""
                kind = _kind(path, fields[1], start, end - start)
            elif fields[0] in ("Private_Clean:", "Private_Dirty:"):
                found[kind] += int(fields[1])
    return {k: found[k] for k in KINDS}


def fork_floor() -> dict[str, int]:
    """A sleeping fork of a process laid out as the zygote is (its preloads, a frozen GC)."""
    from agent_run.supervisor.zygote import PRELOAD, _warm

    for name in PRELOAD:
        importlib.import_module(name)
    _warm()
    gc.freeze()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.setsid()
        os.write(write, b"x")
        time.sleep(30)
        os._exit(0)
    os.close(write)
    os.read(read, 1)
    time.sleep(0.5)  # settled: nothing left for it to do but sleep
    try:
        return private_by_kind(pid)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(read)


def one_round(home, client: RawClient, workdir: str, agents: int) -> list[dict[str, int]]:
    ids = [
        client.call("start", {"task": LONG_TASK, "workdir": workdir})["id"] for _ in range(agents)
    ]
    try:
        rows = wait_for(lambda: running_rows(home, ids), timeout=60, what="agents running")
        time.sleep(1.0)  # a few steps streamed: the supervisors are in their steady loop
        return [private_by_kind(row["supervisor_pid"]) for row in rows]
    finally:
        for agent_id in ids:
            client.call("cancel", {"agent_id": agent_id})
        wait_all_terminal(home, ids, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    info = machine_info()
    floor = fork_floor()
    samples: list[dict[str, int]] = []
    config = BENCH_CONFIG + 'sandbox = "none"\n'
    with daemon_env(config, env={"AGENT_RUN_FORK_SERVER": "1"}, fresh=True) as (home, _d, wd):
        with RawClient(home.socket_path, timeout=120) as client:
            one_round(home, client, str(wd), 1)  # the home's first agent starts the zygote
            wait_for(lambda: zygote_ready(home), timeout=60, what="the zygote")
            for _ in range(args.rounds):
                samples += one_round(home, client, str(wd), args.agents)
    stats = {k: summary([s[k] for s in samples]) for k in KINDS}
    totals = summary([sum(s.values()) for s in samples])
    rows = [[k, stats[k]["p50"], floor[k], stats[k]["p50"] - floor[k]] for k in KINDS]
    fork_total = sum(floor.values())
    rows.append(["total (USS)", totals["p50"], fork_total, totals["p50"] - fork_total])
    print(f"{len(samples)} supervisors of long demo agents, private KiB, p50")
    print_table(["mapping", "supervisor", "sleeping fork", "supervisor - fork"], rows)
    write_results(
        "supervisor_pages",
        {"machine": info, "args": vars(args), "floor": floor, "stats": stats, "samples": samples},
    )


if __name__ == "__main__":
    main()
