"""Many browser tabs must not load the daemon: daemon `ping` latency while web pages stream.

One real daemon and one real `agent-run web` process. Three phases, each with a pinger that
calls `ping` on a fresh socket connection every 20 ms and records the round trip:

  idle       nothing runs, no tab is open (the baseline)
  batch      two repeated batches of --runs demo agents each (default 50: the issue's 100 agents) run, no tab open
  batch+tabs the same work again while 20 simulated tabs are open: each holds `GET /events`
             (SSE) and, on every event, re-fetches the page it shows, as live.js does (10 tabs
             on the home page, 10 on the batch page)

Reported: ping p50/p95/max per phase, the ratios batch+tabs / batch and batch+tabs / idle,
events and page fetches served, and each phase's wall time.

Run:  uv run python bench/bench_web_tabs.py [--tabs 20] [--runs 50]   (~2 min on a loaded 2-core machine)
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import httpx2
from _common import daemon_env, machine_info, print_table, ratio, summary, write_results

from agent_run.rpc.client import RpcClient
from tests.batch_harness import make_repo, wait_batch
from tests.web_harness import WebProcess  # noqa: E402

PING_INTERVAL = 0.02
MIN_REFRESH_SECONDS = 0.5  # live.js's MIN_REFRESH_MS


class Pinger(threading.Thread):
    def __init__(self, home) -> None:
        super().__init__(daemon=True)
        self.home, self.samples, self.stop = home, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            begun = time.perf_counter()
            with RpcClient(self.home.socket_path, timeout=30) as client:
                client.call("ping")
            self.samples.append((time.perf_counter() - begun) * 1000)
            self.stop.wait(PING_INTERVAL)


def tab(base: str, token: str, path: str, counts: dict[str, int], lock: threading.Lock) -> None:
    """A page left open, as live.js keeps it: its event stream, and on a change a live re-fetch
    of the page (`X-Live: 1`, `X-Revision`: the event's id), at most one every 0.5 s."""
    client = httpx2.Client(base_url=base, timeout=60)
    try:
        client.get(f"/?token={token}")
        with client.stream("GET", "/events", timeout=None) as stream:
            last, pending, fetched_at = "", False, 0.0
            for line in stream.iter_lines():
                if line.startswith("id:"):
                    last = line[3:].strip()
                if line.startswith("event: change"):
                    pending = True
                elif (
                    line == "" and pending and time.monotonic() - fetched_at >= MIN_REFRESH_SECONDS
                ):
                    pending, fetched_at = False, time.monotonic()
                    page = client.get(path, headers={"x-live": "1", "x-revision": last})
                    with lock:
                        counts["events"] += 1
                        counts["fetches"] += 1
                        # the web process says whether this refresh cost a render or shared one
                        if page.headers.get("x-live-render") == "rendered":
                            counts["renders"] += 1
    except Exception:  # the web process is stopped at the end: the stream breaks
        pass
    finally:
        client.close()


def tab_worker(base: str, token: str, paths: list[str]) -> int:
    """`--tab-worker`: the tabs in a process of their own, so they do not slow the pinger's
    interpreter; prints what it served when stdin closes."""
    counts, lock = {"events": 0, "fetches": 0, "renders": 0}, threading.Lock()
    for path in paths:
        threading.Thread(target=tab, args=(base, token, path, counts, lock), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()
    print(json.dumps(counts), flush=True)
    return 0


def run_batches(daemon, runs: int, prefix: str) -> float:
    repo = make_repo()
    begun = time.monotonic()
    ids = [
        daemon.call(
            "batch_start",
            {
                "workflow": "repeated",
                "project": str(repo),
                "runs": runs,
                "concurrency": 8,
                "runtime": "demo",
                "prompt": f"answer: {prefix} {n}",
                "profile": "read_only",
            },
        )["id"]
        for n in range(2)
    ]
    for batch_id in ids:
        batch = wait_batch(daemon, batch_id, timeout=600)
        assert batch["state"] == "completed", batch
    return time.monotonic() - begun


def phase(home, work) -> tuple[list[float], float]:
    pinger = Pinger(home)
    pinger.start()
    wall = work()
    pinger.stop.set()
    pinger.join()
    return pinger.samples, wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tabs", type=int, default=20)
    parser.add_argument("--tab-worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument(
        "--runs",
        type=int,
        default=50,
        help="runs per batch, two batches (default 50: the issue's 100 agents, ~2 min)",
    )
    args = parser.parse_args()
    if args.tab_worker:
        return tab_worker(args.tab_worker[0], os.environ["BENCH_WEB_TOKEN"], args.tab_worker[1:])
    results: dict[str, dict] = {}
    with daemon_env() as (home, daemon, _workdir):
        web = WebProcess(home).start()
        try:
            idle, idle_wall = phase(home, lambda: time.sleep(5) or 5.0)
            alone, alone_wall = phase(home, lambda: run_batches(daemon, args.runs, "alone"))
            first = daemon.call("list_batches", {"limit": 1})["items"][0]["id"]
            paths = ["/" if n % 2 == 0 else f"/batches/{first}" for n in range(args.tabs)]
            # The token goes by environment: it may start with "-", which argparse takes for an option.
            worker = subprocess.Popen(
                [sys.executable, __file__, "--tab-worker", web.base, *paths],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "BENCH_WEB_TOKEN": web.token},
            )
            assert worker.stdout.readline().strip() == "ready"
            time.sleep(1.0)  # the tabs connect before the work starts
            tabs, tabs_wall = phase(home, lambda: run_batches(daemon, args.runs, "tabs"))
            counts = json.loads(worker.communicate("", timeout=60)[0].strip().splitlines()[-1])
        finally:
            web.stop()
    for name, samples, wall in (
        ("idle", idle, idle_wall),
        ("batch", alone, alone_wall),
        (f"batch+{args.tabs} tabs", tabs, tabs_wall),
    ):
        results[name] = {**summary(samples), "wall_s": wall}
    rows = [
        [
            name,
            f"{r['p50']:.2f}",
            f"{r['p95']:.2f}",
            f"{r['max']:.1f}",
            r["n"],
            f"{r['wall_s']:.1f}",
        ]
        for name, r in results.items()
    ]
    print_table(["phase", "ping p50 ms", "p95 ms", "max ms", "pings", "wall s"], rows)
    with_tabs = results[f"batch+{args.tabs} tabs"]
    summary_ratios = {
        "p95_tabs_over_batch": ratio(with_tabs["p95"], results["batch"]["p95"]),
        "p95_tabs_over_idle": ratio(with_tabs["p95"], results["idle"]["p95"]),
        "wall_tabs_over_batch": ratio(with_tabs["wall_s"], results["batch"]["wall_s"]),
    }
    print(
        f"ping p95 batch+tabs / batch: {summary_ratios['p95_tabs_over_batch']:.2f}; "
        f"/ idle: {summary_ratios['p95_tabs_over_idle']:.2f}; batch wall with tabs / without: "
        f"{summary_ratios['wall_tabs_over_batch']:.2f}; events {counts['events']}, page fetches {counts['fetches']}, "
        f"of them rendered {counts.get('renders', 0)}"
    )
    write_results(
        "bench_web_tabs",
        {
            "machine": machine_info(),
            "tabs": args.tabs,
            "agents": 2 * args.runs,
            "phases": results,
            "ratios": summary_ratios,
            "served": counts,
            "samples": {"idle": idle, "batch": alone, "tabs": tabs},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
