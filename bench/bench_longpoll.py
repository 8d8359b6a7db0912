"""How soon a `list_agents` long-poll (`after_revision` + `wait_seconds`) wakes after a change.

A client parks a long-poll on the daemon; the benchmark then commits one event straight into
the state database and nudges the daemon's wake socket after the commit, as a supervisor does
(`--no-nudge`: it does not, as a lost nudge, so the daemon's backstop poll finds it), and stamps
the commit. Wake latency = the poll's return minus that stamp. Baseline: a `ping` round trip on
a fresh connection, in the same loop.

Run:  uv run python bench/bench_longpoll.py [--no-nudge]
"""

import sys
import threading
import time

from _common import daemon_env, print_table, ratio, summary, write_results

from agent_run.rpc.client import RawClient
from agent_run.store.db import connect, on_commit, write
from agent_run.store.events import append_event
from agent_run.store.wake import Waker

ROUNDS = 60


def main() -> int:
    nudge = "--no-nudge" not in sys.argv[1:]
    wakes, pings = [], []
    with daemon_env() as (home, daemon, _workdir):
        conn = connect(home.db_path)
        if nudge:
            on_commit(conn, Waker(home.wake_path).wake)
        with daemon.client() as client:
            revision = client.call("list_agents", {})["revision"]
        for _ in range(ROUNDS):
            returned: dict[str, float] = {}

            def poll(after: int = revision, returned: dict[str, float] = returned) -> None:
                with RawClient(home.socket_path, timeout=30) as c:
                    result = c.call("list_agents", {"after_revision": after, "wait_seconds": 10})
                returned["at"] = time.perf_counter()
                returned["revision"] = result["revision"]

            thread = threading.Thread(target=poll)
            thread.start()
            time.sleep(0.05)  # let the poll park in the daemon before the change it waits for
            with write(conn):
                append_event(
                    conn, agent_id="ag_bench", execution_id="ex_bench", kind="bench", data={}
                )
            committed = time.perf_counter()
            thread.join()
            wakes.append((returned["at"] - committed) * 1000)
            revision = returned["revision"]
            begun = time.perf_counter()
            with RawClient(home.socket_path, timeout=30) as c:
                c.call("ping")
            pings.append((time.perf_counter() - begun) * 1000)
        conn.close()
    wake, ping = summary(wakes), summary(pings)
    print_table(
        ["measure", "p50 ms", "p95 ms", "max ms"],
        [
            [
                "long-poll wake after commit" + ("" if nudge else " (no nudge)"),
                f"{wake['p50']:.1f}",
                f"{wake['p95']:.1f}",
                f"{wake['max']:.1f}",
            ],
            [
                "ping round trip (fresh connection)",
                f"{ping['p50']:.2f}",
                f"{ping['p95']:.2f}",
                f"{ping['max']:.2f}",
            ],
        ],
    )
    print(f"wake / ping (p50): {ratio(wake['p50'], ping['p50']):.1f}")
    write_results(
        "bench_longpoll",
        {
            "rounds": ROUNDS,
            "nudge": nudge,
            "wake_ms": wake,
            "ping_ms": ping,
            "wake_over_ping_p50": ratio(wake["p50"], ping["p50"]),
            "samples": {"wake_ms": wakes, "ping_ms": pings},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
