"""The quick start as a new user runs it: `agent-run demo` in a fresh home (the daemon started
by it, a 3-candidate x 2-reviewer ranked batch of demo agents in git worktrees, every answer
verified, the ranking printed), timed from the command to its exit.

    quickstart    `python -m agent_run --home H demo`, H a fresh temp home each round (the
                  daemon it autostarts is stopped and the home removed after each round)
    bare          `python -c pass`, interleaved (context: the machine's speed this run)

Reported: p50 / max of each, the quick start / 8 s (the performance issue's goal) and the
quick start / bare spawn.

Run:  uv run python bench/bench_quickstart.py [--rounds 3]
"""

import argparse
import os
import subprocess
import sys
import time

from _common import machine_info, print_table, ratio, summary, write_results

from agent_run.system.home import Home
from tests.harness import kill_leftovers, remove_home, short_tmpdir

GOAL_SECONDS = 8.0


def quickstart_round() -> float:
    home = Home(short_tmpdir("arq-") / "h")
    env = {**os.environ, "AGENT_RUN_HOME": str(home.root)}
    env.pop("AGENT_RUN_NO_AUTOSTART", None)
    cli = [sys.executable, "-m", "agent_run", "--home", str(home.root)]
    try:
        t0 = time.perf_counter()
        done = subprocess.run(
            [*cli, "demo"], env=env, capture_output=True, text=True, timeout=300, check=True
        )
        elapsed = time.perf_counter() - t0
        assert "verified" in done.stdout, done.stdout[-2000:]
        return elapsed
    finally:
        subprocess.run([*cli, "api", "stop"], env=env, capture_output=True, timeout=60)
        kill_leftovers(home)
        remove_home(home)


def bare_spawn() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    info = machine_info()
    samples: dict[str, list[float]] = {"quickstart": [], "bare": []}
    for _ in range(args.rounds):
        samples["bare"].append(bare_spawn())
        samples["quickstart"].append(quickstart_round())
    stats = {name: summary(values) for name, values in samples.items()}
    ratios = {
        "quickstart p50 / 8 s goal": ratio(stats["quickstart"]["p50"], GOAL_SECONDS),
        "quickstart p50 / bare spawn p50": ratio(stats["quickstart"]["p50"], stats["bare"]["p50"]),
    }
    print(f"load average at start: {info['loadavg_at_start']}")
    print_table(["what", "p50 s", "max s"], [[k, v["p50"], v["max"]] for k, v in stats.items()])
    print_table(["ratio", "value"], [[k, v] for k, v in ratios.items()])
    path = write_results(
        "quickstart", {"machine": info, "summary": stats, "ratios": ratios, "samples": samples}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
