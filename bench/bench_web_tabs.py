"""Many browser tabs must not load the daemon: daemon `ping` latency while web pages stream.

One real daemon and one real `agent-run web` process. Three phases, each with a pinger that
calls `ping` on a fresh socket connection every 20 ms and records the round trip:

  idle       nothing runs, no tab is open (the baseline)
  batch      two repeated batches of --runs demo agents each (default 50: the issue's 100 agents) run, no tab open
  batch+tabs the same work again while 20 simulated tabs are open: each holds `GET /events`
             (SSE) and, on an event that concerns its page (live.js's `data-watch` test),
             re-fetches it, as live.js does; the tabs on a run page also follow its Session
             as follow.js does: on an event naming the run's agent they ask
             `/agents/<id>/transcript?after=CURSOR` for what is new (by default 8 tabs on the
             home page, 6 on the page of the first batch this phase runs, 6 on the pages of
             its first six runs)
  interleaved the same work once more, the tab process paused and resumed every 2 s
             (SIGSTOP/SIGCONT): pings with and without the tabs come from the same batch, under
             the same load from the rest of a shared machine, so their ratio is the claim

Reported: ping p50/p95/max per phase, the ratios batch+tabs / batch and batch+tabs / idle,
events and page fetches served, each phase's wall time and the CPU seconds the daemon and the
web process used; for the interleaved phase, ping p95 tabs on / paused and the daemon's CPU
per second on / paused (what the tabs cost the daemon itself).

Run:  uv run python bench/bench_web_tabs.py [--tabs 20] [--runs 50]   (~5 min on a loaded 2-core machine)
      add `--profile` to sample the daemon with py-spy (`--py-spy CMD`, default `py-spy`;
      `--py-spy "uv tool run py-spy"` fetches it from PyPI) through the batch phase and the
      tabs phase: the collapsed stacks go to bench/results/, each phase's busiest frames and
      database reads are printed.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx2
from _common import (
    RESULTS_DIR,
    daemon_env,
    machine_info,
    print_table,
    ratio,
    summary,
    write_results,
)

from agent_run.rpc.client import RawClient
from tests.batch_harness import make_repo, wait_batch
from tests.web_harness import WebProcess  # noqa: E402

PING_INTERVAL = 0.02
TOGGLE_SECONDS = 2.0  # tabs on, then paused, alternately, during the interleaved phase
SETTLE_SECONDS = 0.5  # pings in the first moment after a toggle belong to neither state
MIN_REFRESH_SECONDS = 0.5  # live.js's MIN_REFRESH_MS


class Pinger(threading.Thread):
    """Pings every PING_INTERVAL; each sample is kept under the toggler's state at its start
    (`on`, `off`, or None in a settling moment, dropped), or under `all` without a toggler."""

    def __init__(self, home, toggler: "Toggler | None" = None) -> None:
        super().__init__(daemon=True)
        self.home, self.toggler, self.stop = home, toggler, threading.Event()
        self.tagged: dict[str, list[float]] = {"all": [], "on": [], "off": []}

    @property
    def samples(self) -> list[float]:
        return self.tagged["all"]

    def run(self) -> None:
        while not self.stop.is_set():
            state = self.toggler.state() if self.toggler else "all"
            begun = time.perf_counter()
            with RawClient(self.home.socket_path, timeout=30) as client:
                client.call("ping")
            elapsed = (time.perf_counter() - begun) * 1000
            if state is not None and (not self.toggler or self.toggler.state() == state):
                self.tagged[state].append(elapsed)
            self.stop.wait(PING_INTERVAL)


class Toggler(threading.Thread):
    """Pauses and resumes the tab worker (SIGSTOP/SIGCONT) every TOGGLE_SECONDS, so pings with
    and without the tabs are taken during the same batch, under the same load from the rest of
    the machine; the daemon's CPU seconds are added up per state."""

    def __init__(self, daemon_pid: int) -> None:
        super().__init__(daemon=True)
        self.daemon_pid, self.stop = daemon_pid, threading.Event()
        self.worker_pid: int | None = None
        self.on, self.since = True, time.monotonic()
        self.begun = threading.Event()

    def begin(self, worker_pid: int) -> None:
        """The tabs are open: start toggling them."""
        self.worker_pid, self.since = worker_pid, time.monotonic()
        self.begun.set()
        self.cpu = {"on": 0.0, "off": 0.0}
        self.seconds = {"on": 0.0, "off": 0.0}

    def state(self) -> str | None:
        if not self.begun.is_set() or time.monotonic() - self.since < SETTLE_SECONDS:
            return None  # the other state's requests may still be in flight
        return "on" if self.on else "off"

    def run(self) -> None:
        self.begun.wait()
        cpu = cpu_seconds(self.daemon_pid)
        while True:
            stopped = self.stop.wait(TOGGLE_SECONDS)
            now_cpu, key = cpu_seconds(self.daemon_pid), "on" if self.on else "off"
            self.cpu[key] += now_cpu - cpu
            self.seconds[key] += time.monotonic() - self.since
            cpu = now_cpu
            if stopped:
                break
            self.on = not self.on
            os.kill(self.worker_pid, signal.SIGCONT if self.on else signal.SIGSTOP)
            self.since = time.monotonic()
        os.kill(self.worker_pid, signal.SIGCONT)


def concerns(watch: list[str], data: str) -> bool:
    """live.js's test: does a change event's summary name something the page watches?"""
    summary = json.loads(data)
    if "*" in watch or summary.get("truncated"):
        return True
    return any(i in watch for i in summary.get("agents", []) + summary.get("batches", []))


FOLLOW_PAUSE_SECONDS = 0.2  # follow.js's PAUSE_MS
AGENT = re.compile(r'id="session" data-agent="([^"]*)"')


class Session:
    """A run page's Session as follow.js keeps it: the agent shown, the cursor, the turn."""

    def __init__(self) -> None:
        self.agent, self.cursor, self.turn, self.at = "", "0", "0", 0.0

    def show(self, html: str) -> None:
        """A (re)fetched page: a new attempt's agent is followed from its start."""
        match = AGENT.search(html)
        if match and match.group(1) != self.agent:
            self.agent, self.cursor, self.turn = match.group(1), "0", "0"

    def follow(self, client: httpx2.Client, count) -> None:
        """Ask for the blocks after the cursor (more pages while `more`), as follow.js does."""
        while self.agent:
            self.at = time.monotonic()
            page = client.get(
                f"/agents/{self.agent}/transcript",
                params={"after": self.cursor, "turn": self.turn},
            ).json()
            count("follows")
            self.cursor = str(page["cursor"])
            turns = re.findall(r'data-turn="(\d+)"', page["html"])
            self.turn = turns[-1] if turns else self.turn
            if not page["more"]:
                return


def tab(base: str, token: str, path: str, counts: dict[str, int], lock: threading.Lock) -> None:
    """A page left open, as live.js keeps it: its event stream, and on a change that concerns
    it (its `data-watch`: `*` on home, the batch's id on a batch page, the batch's and the
    agent's on a run page) a live re-fetch of the page (`X-Live: 1`, `X-Revision`: the event's
    id), at most one every 0.5 s; on a run page, the Session followed by cursor on an event
    that names its agent (at most one every 0.2 s), as follow.js does."""
    client = httpx2.Client(base_url=base, timeout=60)

    def count(name: str, n: int = 1) -> None:
        with lock:
            counts[name] = counts.get(name, 0) + n

    try:
        client.get(f"/?token={token}")
        first = client.get(path).text
        watch = re.search(r'data-watch="([^"]*)"', first).group(1).split()
        session = Session() if "/runs/" in path else None
        if session is not None:
            session.show(first)
            session.follow(client, count)
        with client.stream("GET", "/events", timeout=None) as stream:
            last, pending, fetched_at, is_change, named = "", False, 0.0, False, False
            for line in stream.iter_lines():
                if line.startswith("id:"):
                    last = line[3:].strip()
                if line.startswith("event:"):
                    is_change = line == "event: change"
                elif line.startswith("data:") and is_change:
                    data = line[5:].strip()
                    pending = pending or concerns(watch, data)
                    named = named or bool(
                        session and session.agent and concerns([session.agent], data)
                    )
                if line != "":
                    continue
                count("events")
                if pending and time.monotonic() - fetched_at >= MIN_REFRESH_SECONDS:
                    pending, fetched_at = False, time.monotonic()
                    page = client.get(path, headers={"x-live": "1", "x-revision": last})
                    count("fetches")
                    # the web process says whether this refresh cost a render or shared one
                    if page.headers.get("x-live-render") == "rendered":
                        count("renders")
                    if session is not None:
                        agent = session.agent
                        session.show(page.text)
                        named = named or session.agent != agent
                if named and session and time.monotonic() - session.at >= FOLLOW_PAUSE_SECONDS:
                    named = False
                    session.follow(client, count)
    except httpx2.TransportError:  # the web process is stopped at the end: the stream breaks
        pass
    except Exception as exc:  # a bench bug must not pass as "no load"
        print(f"tab {path}: {exc!r}", file=sys.stderr, flush=True)
        count("errors")
    finally:
        client.close()


def tab_worker(base: str, token: str, paths: list[str]) -> int:
    """`--tab-worker`: the tabs in a process of their own, so they do not slow the pinger's
    interpreter; prints what it served when stdin closes."""
    counts = {"events": 0, "fetches": 0, "renders": 0, "follows": 0}
    lock = threading.Lock()
    for path in paths:
        threading.Thread(target=tab, args=(base, token, path, counts, lock), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()
    print(json.dumps(counts), flush=True)
    return 0


def tab_paths(daemon, batch_id: str, tabs: int) -> list[str]:
    """Of every 10 tabs: 4 on home, 3 on the batch's page, 3 on its runs' pages (each another
    run's, following its Session: runs spread over the batch, so most start after the tabs
    are open and their Session streams into an open page)."""
    every = [r["id"] for r in daemon.call("batch", {"batch_id": batch_id})["runs"]]
    wanted = max(1, (tabs * 3 + 9) // 10)
    runs = [every[(len(every) - 1) * (k + 1) // wanted] for k in range(wanted)]
    paths, on_runs = [], 0
    for n in range(tabs):
        kind = n % 10
        if kind < 4:
            paths.append("/")
        elif kind < 7:
            paths.append(f"/batches/{batch_id}")
        else:
            paths.append(f"/batches/{batch_id}/runs/{runs[on_runs % len(runs)]}")
            on_runs += 1
    return paths


def run_batches(daemon, runs: int, prefix: str, on_started=None) -> float:
    """Two repeated demo batches of `runs` each to the end; `on_started(ids)` once both exist."""
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
                # a short stream of messages, so an open Session has something to follow
                "prompt": f"steps: 4\nstep_seconds: 0.25\nanswer: {prefix} {n}",
                "profile": "read_only",
            },
        )["id"]
        for n in range(2)
    ]
    if on_started is not None:
        on_started(ids)
    for batch_id in ids:
        batch = wait_batch(daemon, batch_id, timeout=600)
        assert batch["state"] == "completed", batch
    return time.monotonic() - begun


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process (all its threads) has used so far, from /proc (Linux)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


IDLE_LEAVES = ("EpollSelector.select", "_PollLikeSelector.select", "_worker (concurrent")
DB_READ = "ServiceContext.db.<locals>.<lambda>"  # a tool's work on a database thread


class Profile:
    """py-spy sampling the daemon (`--profile`) from `start` until `stop`: its stacks, collapsed
    into bench/results/, then tallied: busy samples (not waiting in epoll or for pool work) and,
    of those, what ran on the database threads (the function `ctx.db` ran: which read)."""

    def __init__(self, command: list[str] | None, pid: int, name: str) -> None:
        self.command, self.pid = command, pid
        self.path = RESULTS_DIR / f"bench_web_tabs_profile_{name}.txt"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if self.command:
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            self.proc = subprocess.Popen(
                [
                    *self.command,
                    "record",
                    "--pid",
                    str(self.pid),
                    "--rate",
                    "100",
                    "--nonblocking",
                    "--format",
                    "raw",
                    "--output",
                    str(self.path),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes what it has, then exits

    def top(self, n: int = 12) -> dict[str, Any] | None:
        if self.proc is None:
            return None
        self.proc.wait(timeout=120)
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        total, busy, own, reads = 0, 0, {}, {}
        for line in lines:
            stack, _, count = line.rpartition(" ")
            frames, samples = stack.split(";"), int(count)
            total += samples
            if frames[-1].startswith(IDLE_LEAVES):
                continue
            busy += samples
            own[frames[-1]] = own.get(frames[-1], 0) + samples
            at = next((i for i, f in enumerate(frames) if f.startswith(DB_READ)), None)
            if at is not None and at + 1 < len(frames):
                reads[frames[at + 1]] = reads.get(frames[at + 1], 0) + samples
        return {
            "samples": total,
            "busy": busy,
            "self": sorted(own.items(), key=lambda kv: -kv[1])[:n],
            "db_reads": sorted(reads.items(), key=lambda kv: -kv[1])[:n],
        }


def phase(home, work, pids: dict[str, int]) -> tuple[list[float], float, dict[str, float]]:
    """Run `work` while pinging; the ping samples, the wall time and each process's CPU seconds."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    pinger = Pinger(home)
    pinger.start()
    wall = work()
    pinger.stop.set()
    pinger.join()
    return pinger.samples, wall, {n: cpu_seconds(pid) - before[n] for n, pid in pids.items()}


def interleaved(home, work, toggler: Toggler) -> Pinger:
    """Run `work` while the tabs are on and paused in turns (from `toggler.begin`), pinging."""
    pinger = Pinger(home, toggler)
    toggler.start()
    pinger.start()
    work()
    toggler.stop.set()
    toggler.join()
    pinger.stop.set()
    pinger.join()
    return pinger


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
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the daemon with py-spy through the batch phase and the tabs phase",
    )
    parser.add_argument(
        "--py-spy", default="py-spy", help="the py-spy command (e.g. 'uv tool run py-spy')"
    )
    args = parser.parse_args()
    if args.tab_worker:
        return tab_worker(args.tab_worker[0], os.environ["BENCH_WEB_TOKEN"], args.tab_worker[1:])
    results: dict[str, dict] = {}
    with daemon_env() as (home, daemon, _workdir):
        web = WebProcess(home).start()
        pids = {"daemon": daemon.call("ping")["pid"], "web": web.proc.pid}
        try:
            idle, idle_wall, idle_cpu = phase(home, lambda: time.sleep(5) or 5.0, pids)
            spy = args.py_spy.split() if args.profile else None
            profiles = {n: Profile(spy, pids["daemon"], n) for n in ("batch", "tabs")}
            profiles["batch"].start()
            alone, alone_wall, alone_cpu = phase(
                home, lambda: run_batches(daemon, args.runs, "alone"), pids
            )
            profiles["batch"].stop()
            workers: list[subprocess.Popen] = []

            def open_tabs(ids: list[str]) -> None:
                """Tabs on home, on the page of a batch this phase runs and on its runs' pages."""
                paths = tab_paths(daemon, ids[0], args.tabs)
                # The token goes by environment: it may start with "-", which argparse takes
                # for an option.
                worker = subprocess.Popen(
                    [sys.executable, __file__, "--tab-worker", web.base, *paths],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "BENCH_WEB_TOKEN": web.token},
                    # A browser is not in the pinger's session; sharing one would put the tabs
                    # in the pinger's scheduling group (the kernel's autogroup per session).
                    start_new_session=True,
                )
                assert worker.stdout.readline().strip() == "ready"
                workers.append(worker)
                if len(workers) == 1:  # the tabs phase: profiled from when the tabs are open
                    profiles["tabs"].start()

            def tabs_work() -> float:
                return run_batches(daemon, args.runs, "tabs", open_tabs)

            tabs, tabs_wall, tabs_cpu = phase(home, tabs_work, pids)
            profiles["tabs"].stop()
            tabs_cpu["tabs"] = cpu_seconds(workers[0].pid)
            served = [workers[0].communicate("", timeout=60)[0]]
            toggler = Toggler(daemon_pid=pids["daemon"])

            def mixed_tabs(ids: list[str]) -> None:
                open_tabs(ids)
                toggler.begin(workers[-1].pid)

            mixed = interleaved(
                home, lambda: run_batches(daemon, args.runs, "mixed", mixed_tabs), toggler
            )
            served.append(workers[-1].communicate("", timeout=60)[0])
        finally:
            web.stop()
            for worker in workers:
                worker.kill()
    counts = json.loads(served[0].strip().splitlines()[-1])  # the tabs phase's
    for name, samples, wall, cpu in (
        ("idle", idle, idle_wall, idle_cpu),
        ("batch", alone, alone_wall, alone_cpu),
        (f"batch+{args.tabs} tabs", tabs, tabs_wall, tabs_cpu),
    ):
        results[name] = {
            **summary(samples),
            "wall_s": wall,
            "daemon_cpu_s": cpu["daemon"],
            "web_cpu_s": cpu["web"],
            "tabs_cpu_s": cpu.get("tabs", 0.0),
        }
    rows = [
        [
            name,
            f"{r['p50']:.2f}",
            f"{r['p95']:.2f}",
            f"{r['max']:.1f}",
            r["n"],
            f"{r['wall_s']:.1f}",
            f"{r['daemon_cpu_s']:.1f}",
            f"{r['web_cpu_s']:.1f}",
            f"{r['tabs_cpu_s']:.1f}",
        ]
        for name, r in results.items()
    ]
    print_table(
        [
            "phase",
            "ping p50 ms",
            "p95 ms",
            "max ms",
            "pings",
            "wall s",
            "daemon cpu s",
            "web cpu s",
            "tab process cpu s",
        ],
        rows,
    )
    with_tabs = results[f"batch+{args.tabs} tabs"]
    summary_ratios = {
        "p95_tabs_over_batch": ratio(with_tabs["p95"], results["batch"]["p95"]),
        "p95_tabs_over_idle": ratio(with_tabs["p95"], results["idle"]["p95"]),
        "wall_tabs_over_batch": ratio(with_tabs["wall_s"], results["batch"]["wall_s"]),
        "daemon_cpu_tabs_over_batch": ratio(
            with_tabs["daemon_cpu_s"], results["batch"]["daemon_cpu_s"]
        ),
    }
    print(
        f"ping p95 batch+tabs / batch: {summary_ratios['p95_tabs_over_batch']:.2f}; "
        f"/ idle: {summary_ratios['p95_tabs_over_idle']:.2f}; batch wall with tabs / without: "
        f"{summary_ratios['wall_tabs_over_batch']:.2f}; daemon CPU with tabs / without: "
        f"{summary_ratios['daemon_cpu_tabs_over_batch']:.2f}; load {os.getloadavg()[0]:.1f}; "
        f"events {counts['events']}, page fetches {counts['fetches']}, "
        f"of them rendered {counts.get('renders', 0)}; Session follows {counts.get('follows', 0)}"
    )
    on, off = summary(mixed.tagged["on"]), summary(mixed.tagged["off"])
    cpu_rate = {k: ratio(toggler.cpu[k], toggler.seconds[k]) for k in ("on", "off")}
    summary_ratios["interleaved_p95_on_over_off"] = ratio(on["p95"], off["p95"])
    summary_ratios["interleaved_daemon_cpu_on_over_off"] = ratio(cpu_rate["on"], cpu_rate["off"])
    print(
        f"interleaved (tabs on/paused every {TOGGLE_SECONDS:.0f} s, one batch): ping p95 on "
        f"{on['p95']:.2f} ms ({on['n']} pings), paused {off['p95']:.2f} ms ({off['n']}): "
        f"{summary_ratios['interleaved_p95_on_over_off']:.2f}; daemon CPU per second on / "
        f"paused: {summary_ratios['interleaved_daemon_cpu_on_over_off']:.2f}"
    )
    tops = {name: prof.top() for name, prof in profiles.items()}
    for name, top in tops.items():
        if top:
            print(
                f"daemon profile, {name} phase: {top['samples']} samples at 100 Hz, "
                f"{top['busy']} busy (not waiting in epoll or for pool work)"
            )
            for title in ("self", "db_reads"):
                print(f"  {title}:")
                for frame, samples in top[title]:
                    print(f"  {samples:6d}  {frame}")
    write_results(
        "bench_web_tabs",
        {
            "machine": machine_info(),
            "tabs": args.tabs,
            "agents": 2 * args.runs,
            "phases": results,
            "ratios": summary_ratios,
            "served": counts,
            "interleaved": {"on": on, "off": off, "daemon_cpu_per_s": cpu_rate},
            "profiles": tops,
            "samples": {
                "idle": idle,
                "batch": alone,
                "tabs": tabs,
                "tabs_on": mixed.tagged["on"],
                "tabs_paused": mixed.tagged["off"],
            },
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
