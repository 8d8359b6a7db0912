"""Wall time of a plain CLI verb, `agent-run agents` against a live daemon, beside
`python -c "import click"` (the floor any click CLI pays) and a bare interpreter.

    click         `python -c "import click"`
    bare          `python -c pass`
    current       `python -m agent_run --home H agents` of this tree (verbs from cli_spec.json)
    ref           the same of --ref COMMIT's src/ (default: main before the lazy CLI), via
                  PYTHONPATH
All spawned interleaved in one loop against one real daemon (fresh temp home, reconcile 2 s),
first pass discarded; each `agents` answer is checked to be the JSON page.

Run:  uv run python bench/bench_cli.py [--samples 20] [--ref 8924acf] [--pycache]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from _common import (
    daemon_env,
    machine_info,
    print_table,
    pycache_env,
    ratio,
    ref_tree,
    summary,
    write_results,
)

BEFORE_COMMIT = "8924acf"  # main before this change: the CLI imported the tool table (pydantic)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=120)
    return time.perf_counter() - t0, out.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--ref", default=BEFORE_COMMIT)
    ap.add_argument(
        "--pycache", action="store_true", help="children reuse bytecode from a private cache"
    )
    args = ap.parse_args()
    info = machine_info()
    extra, _prefix = pycache_env(args.pycache)
    base = {**os.environ, **extra, "AGENT_RUN_NO_AUTOSTART": "1"}
    samples: dict[str, list[float]] = {}
    with daemon_env() as (home, _daemon, _workdir), ref_tree(args.ref) as ref:
        runs = {
            "import click": ([sys.executable, "-c", "import click"], base),
            "python -c pass": ([sys.executable, "-c", "pass"], base),
            "agents [current]": (
                [sys.executable, "-m", "agent_run", "--home", str(home.root), "agents"],
                base,
            ),
            f"agents [ref {args.ref}]": (
                [sys.executable, "-m", "agent_run", "--home", str(home.root), "agents"],
                {**base, **(ref or {})},
            ),
        }
        samples = {k: [] for k in runs}
        for i in range(args.samples + 1):  # the first pass is a warm-up, discarded
            for key, (argv, env) in runs.items():
                wall, out = timed(argv, env)
                if key.startswith("agents"):
                    assert json.loads(out)["total"] == 0, out
                if i:
                    samples[key].append(wall)
    report(info, args, samples)


def report(info: dict, args: argparse.Namespace, samples: dict[str, list[float]]) -> None:
    stats = {k: summary(v) for k, v in samples.items()}
    click_p50 = stats["import click"]["p50"]
    rows = [
        (k, s["p50"] * 1e3, s["p95"] * 1e3, ratio(s["p50"], click_p50)) for k, s in stats.items()
    ]
    cur, ref = stats["agents [current]"]["p50"], stats[f"agents [ref {args.ref}]"]["p50"]
    ratios = {
        "current_over_click_p50": ratio(cur, click_p50),
        "ref_over_click_p50": ratio(ref, click_p50),
        "ref_over_current_p50": ratio(ref, cur),
    }
    print(
        f"\nbench_cli: {args.samples} samples, pycache={args.pycache}, loadavg at start "
        f"{tuple(round(x, 2) for x in info['loadavg_at_start'])}"
    )
    print_table(["command", "p50 ms", "p95 ms", "/import click"], rows)
    print(
        f"\nbefore -> after: {ratios['ref_over_click_p50']:.2f}x -> {ratios['current_over_click_p50']:.2f}x "
        f"`import click` ({ratios['ref_over_current_p50']:.2f}x faster)"
    )
    path = write_results(
        "bench_cli_pycache" if args.pycache else "bench_cli",
        {
            "benchmark": "bench_cli",
            "machine": info,
            "args": vars(args),
            "results": stats,
            "ratios": ratios,
            "raw": samples,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
