"""The worker tools as an engine reaches them: the relay it starts, connected to a running
agent's worker gate. Per agent: the relay's spawn until the `tools/list` answer, and the memory
of the supervisor and of its worker tools while that connection is open.

    on     this tree: the supervisor serves the tools itself, one thread per connection
    ref    --ref COMMIT's src/ (default 7c726b5, the last commit whose gate started a
           `python -m agent_run.worker_tools` process per connection), the same way

Each is a user's daemon (a fresh `api serve`, its fork server on, `sandbox = "none"` so that a
ref tree can be imported). A round starts `--agents` long agents on each daemon, and for each
agent spawns the relay its engine would (the command of the execution's MCP config),
writes initialize + notifications/initialized + tools/list and reads the answer; memory is then
sampled with every relay still connected: the supervisor, the relay, and any other process the
supervisor started besides its engine (ref's server). PSS shares a page among the processes
mapping it (the zygote and every supervisor share most of theirs), so the table also gives the
supervisor's USS (private pages): what one more running agent adds.

A daemon importing a tree through PYTHONPATH shows ~0.3 MiB more supervisor USS than one of the
installed package (an A/A run, `--ref HEAD`, says 0.94x): `--this COMMIT` runs the first daemon
from a tree as well, so two commits' supervisors are compared the same way (A/A: 1.01x).

Run:  uv run python bench/bench_worker_gate.py [--rounds 4] [--agents 5] [--ref 7c726b5] [--this HEAD]
"""

import argparse
import contextlib
import json
import os
import subprocess
import time

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
    zygote_ready,
)
from bench_worker_tools import HANDSHAKE

from agent_run.rpc.client import RawClient

PER_CONNECTION_SERVER_COMMIT = "7c726b5"
LONG_TASK = "steps: 1200\nstep_seconds: 0.05\nanswer: long"


def memory_kib(pid: int) -> dict[str, int] | None:
    """Pss and USS (private clean + dirty) in KiB from smaps_rollup, or None if it is gone."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name in ("Pss", "Private_Clean", "Private_Dirty"):
                    fields[name] = int(rest.split()[0])
    except OSError:
        return None
    return {"pss": fields["Pss"], "uss": fields["Private_Clean"] + fields["Private_Dirty"]}


def children(pid: int) -> set[int]:
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found.update(int(p) for p in fh.read().split())
    return found


def running_rows(home, ids: list[str]) -> list | None:
    marks = ",".join("?" * len(ids))
    rows = db_rows(
        home,
        "SELECT agent_id, id, supervisor_pid, engine_pid FROM executions"
        f" WHERE agent_id IN ({marks}) AND engine_pid IS NOT NULL AND state = 'running'",
        tuple(ids),
    )
    return rows if len(rows) == len(ids) else None


def one_round(
    home, client: RawClient, workdir: str, agents: int, relay_env: dict[str, str]
) -> list[dict]:
    ids = [
        client.call("start", {"task": LONG_TASK, "workdir": workdir})["id"] for _ in range(agents)
    ]
    relays: list[subprocess.Popen[bytes]] = []
    samples = []
    try:
        rows = wait_for(lambda: running_rows(home, ids), timeout=60, what="agents running")
        for row in rows:
            sandbox = home.execution_dir(row["agent_id"], row["id"]) / "sandbox"
            wait_for((sandbox / "worker.sock").exists, timeout=30, what="the worker gate")
            # The relay exactly as the engine's MCP config names it (a ref tree's relay module
            # from that tree, as its installed package would give it).
            [server] = json.loads((sandbox / "mcp.json").read_text())["mcpServers"].values()
            t0 = time.perf_counter()
            relay = subprocess.Popen(
                [server["command"], *server["args"]],
                env={"PATH": os.environ["PATH"], **relay_env},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            relays.append(relay)
            assert relay.stdin and relay.stdout
            relay.stdin.write(HANDSHAKE)
            relay.stdin.flush()
            while b'"id":2' not in (line := relay.stdout.readline()):
                if not line:
                    raise RuntimeError("the relay ended before the tools/list answer")
            samples.append({"answer_s": time.perf_counter() - t0, "row": row, "relay": relay.pid})
        for sample in samples:  # every relay connected, every server (if any) running
            row = sample.pop("row")
            others = children(row["supervisor_pid"]) - {row["engine_pid"]}
            sup = memory_kib(row["supervisor_pid"])
            relay_mem = memory_kib(sample.pop("relay"))
            servers = [m for pid in others if (m := memory_kib(pid)) is not None]
            if sup is None or relay_mem is None:
                raise RuntimeError("a supervisor or relay ended mid-sample")
            sample.update(
                supervisor_pss=sup["pss"] / 1024,
                supervisor_uss=sup["uss"] / 1024,
                relay_pss=relay_mem["pss"] / 1024,
                servers=len(servers),
                server_pss=sum(m["pss"] for m in servers) / 1024,
            )
            sample["agent_pss"] = (
                sample["supervisor_pss"] + sample["relay_pss"] + sample["server_pss"]
            )
    finally:
        for relay in relays:
            if relay.stdin:
                relay.stdin.close()
        for relay in relays:
            relay.wait(timeout=30)
        for agent_id in ids:
            client.call("cancel", {"agent_id": agent_id})
        wait_all_terminal(home, ids, timeout=120)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--agents", type=int, default=5)
    parser.add_argument("--ref", default=PER_CONNECTION_SERVER_COMMIT)
    parser.add_argument(
        "--this",
        help="run `on` from COMMIT's src/ too, the same way as ref: a daemon importing a tree"
        " through PYTHONPATH has ~0.3 MiB more supervisor USS than one of the installed package"
        " (an A/A run, --ref HEAD), so compare two commits' supervisors this way",
    )
    args = parser.parse_args()
    config = BENCH_CONFIG + 'sandbox = "none"\n'
    info = machine_info()
    modes = ("on", "ref")
    got: dict[str, list[dict]] = {mode: [] for mode in modes}
    with contextlib.ExitStack() as stack:
        ref_env = stack.enter_context(ref_tree(args.ref))
        this_env = stack.enter_context(ref_tree(args.this))
        envs = {
            "on": {"AGENT_RUN_FORK_SERVER": "1", **(this_env or {})},
            "ref": {"AGENT_RUN_FORK_SERVER": "1", **(ref_env or {})},
        }
        relay_envs = {"on": dict(this_env or {}), "ref": dict(ref_env or {})}
        homes, clients, workdirs = {}, {}, {}
        for mode in modes:
            homes[mode], _daemon, workdirs[mode] = stack.enter_context(
                daemon_env(config, env=envs[mode], fresh=True)
            )
            clients[mode] = stack.enter_context(RawClient(homes[mode].socket_path, timeout=120))
        for mode in modes:  # warm up: the first agent of a home starts its zygote
            one_round(homes[mode], clients[mode], str(workdirs[mode]), 1, relay_envs[mode])
            wait_for(lambda mode=mode: zygote_ready(homes[mode]), timeout=60, what="the zygote")
        for _ in range(args.rounds):
            for mode in modes:
                got[mode] += one_round(
                    homes[mode], clients[mode], str(workdirs[mode]), args.agents, relay_envs[mode]
                )
    report(info, args, got)


def report(info: dict, args: argparse.Namespace, got: dict[str, list[dict]]) -> None:
    measures = (
        "answer_s",
        "agent_pss",
        "supervisor_pss",
        "supervisor_uss",
        "relay_pss",
        "server_pss",
        "servers",
    )
    stats = {mode: {m: summary([s[m] for s in got[mode]]) for m in measures} for mode in got}
    rows = []
    for m in measures:
        on, ref = stats["on"][m]["p50"], stats["ref"][m]["p50"]
        scale = 1000 if m == "answer_s" else 1
        rows.append(
            [
                m.replace("answer_s", "relay spawn -> tools/list answer, ms"),
                on * scale,
                ref * scale,
                ratio(on, ref) if ref else float("nan"),
            ]
        )
    print(f"{args.rounds} rounds x {args.agents} agents per daemon, p50 (memory in MiB)")
    print_table(["measure", args.this or "on", f"ref {args.ref}", "on / ref"], rows)
    write_results(
        "worker_gate",
        {"machine": info, "args": vars(args), "stats": stats, "samples": got},
    )


if __name__ == "__main__":
    main()
