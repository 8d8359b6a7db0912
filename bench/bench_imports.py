"""Import cost of each process entry point, beside a bare interpreter; optionally vs. a commit.

Each sample spawns `python -c "<import>; <report>"`; the child reports its own import time,
module count, VmRSS and whether heavy packages (mcp, pydantic, starlette, structlog) got loaded.
Baseline: `python -c pass` spawned in the same loop. DESIGN.md section 3 wants the supervisor to
import "only what one engine session needs" and `import agent_run.cli.main` to stay light.

--ref COMMIT also extracts that commit's src/ (git archive, into a temp dir) and measures it the
same way, interleaved, through PYTHONPATH; the current tree is the editable install.

Run:  cd /work/main && uv run python bench/bench_imports.py [--samples 12] [--ref b4a42f3]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from _common import ROOT, machine_info, print_table, ratio, summary, write_results

ENTRY_POINTS = {
    "supervisor": "import agent_run.supervisor.run",
    "demo_engine": "import agent_run.engines.demo_program",
    "cli": "import agent_run.cli.main",
    "daemon": "import agent_run.daemon.serve",
}
HEAVY = ("mcp", "pydantic", "starlette", "structlog", "anyio", "httpx")
REPORT = (
    "import json, sys\n"
    "rss = int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1])\n"
    "print(json.dumps({'import_s': dt, 'modules': len(sys.modules), 'rss_kib': rss,\n"
    "  'heavy': [m for m in %r if m in sys.modules],\n"
    "  'file': getattr(sys.modules.get(%r), '__file__', None)}))\n"
)


def child_code(stmt: str) -> str:
    module = stmt.split()[-1]
    return (
        f"import time\nt = time.perf_counter()\n{stmt}\ndt = time.perf_counter() - t\n"
        + REPORT % (HEAVY, module)
    )


def spawn(code: str, env: dict[str, str]) -> tuple[float, dict | None]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - t0
    return wall, (json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument(
        "--ref", default=None, help="a commit to compare against (its src/ via git archive)"
    )
    args = ap.parse_args()
    info = machine_info()
    t_begin = time.perf_counter()

    trees = {"current": dict(os.environ)}
    tmp = None
    try:
        if args.ref:
            tmp = tempfile.mkdtemp(prefix="arref-")
            archive = subprocess.run(
                ["git", "archive", args.ref, "src"], cwd=ROOT, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            trees[f"ref {args.ref}"] = {**os.environ, "PYTHONPATH": os.path.join(tmp, "src")}

        bare_wall: list[float] = []
        bare_rss: list[float] = []
        walls = {(t, e): [] for t in trees for e in ENTRY_POINTS}
        reports = {(t, e): [] for t in trees for e in ENTRY_POINTS}
        bare_code = "import time\ndt = 0.0\nimport sys\n" + REPORT % (HEAVY, "sys")
        for _ in range(args.samples + 1):  # the first pass is a warm-up, discarded
            w, r = spawn(bare_code, dict(os.environ))
            bare_wall.append(w)
            bare_rss.append(r["rss_kib"] / 1024)
            for tree, env in trees.items():
                for entry, stmt in ENTRY_POINTS.items():
                    w, r = spawn(child_code(stmt), env)
                    walls[(tree, entry)].append(w)
                    reports[(tree, entry)].append(r)
        bare_wall, bare_rss = bare_wall[1:], bare_rss[1:]
        walls = {k: v[1:] for k, v in walls.items()}
        reports = {k: v[1:] for k, v in reports.items()}
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - t_begin

    b_wall = summary(bare_wall)
    b_rss = summary(bare_rss)
    results = {}
    rows = [
        (
            "bare python -c pass",
            "-",
            b_wall["p50"] * 1e3,
            b_wall["p95"] * 1e3,
            "-",
            "-",
            b_rss["p50"],
            1.0,
            "-",
        )
    ]
    for (tree, entry), w in walls.items():
        reps = reports[(tree, entry)]
        sw = summary(w)
        imp = summary([r["import_s"] for r in reps])
        rss = summary([r["rss_kib"] / 1024 for r in reps])
        results[f"{tree}:{entry}"] = {
            "spawn_wall_s": sw,
            "import_s": imp,
            "rss_mib": rss,
            "modules": reps[-1]["modules"],
            "heavy": reps[-1]["heavy"],
            "file": reps[-1]["file"],
            "spawn_over_bare_p50": ratio(sw["p50"], b_wall["p50"]),
        }
        rows.append(
            (
                f"{entry} [{tree}]",
                reps[-1]["modules"],
                sw["p50"] * 1e3,
                sw["p95"] * 1e3,
                imp["p50"] * 1e3,
                ",".join(reps[-1]["heavy"]) or "-",
                rss["p50"],
                ratio(sw["p50"], b_wall["p50"]),
                ratio(rss["p50"], b_rss["p50"]),
            )
        )
    ref_ratios = {}
    if args.ref:
        for entry in ENTRY_POINTS:
            cur, ref = results[f"current:{entry}"], results[f"ref {args.ref}:{entry}"]
            ref_ratios[entry] = {
                "spawn_wall_p50_current_over_ref": ratio(
                    cur["spawn_wall_s"]["p50"], ref["spawn_wall_s"]["p50"]
                ),
                "rss_p50_current_over_ref": ratio(cur["rss_mib"]["p50"], ref["rss_mib"]["p50"]),
            }

    print(
        f"\nbench_imports: {args.samples} samples each, {total:.1f}s total, loadavg at start "
        f"{tuple(round(x, 2) for x in info['loadavg_at_start'])}"
    )
    print_table(
        [
            "entry point",
            "modules",
            "spawn p50 ms",
            "spawn p95 ms",
            "import p50 ms",
            "heavy pkgs",
            "RSS MiB",
            "spawn/bare",
            "RSS/bare",
        ],
        rows,
    )
    if ref_ratios:
        print()
        print_table(
            ["entry point", f"spawn current/{args.ref}", f"RSS current/{args.ref}"],
            [
                (e, r["spawn_wall_p50_current_over_ref"], r["rss_p50_current_over_ref"])
                for e, r in ref_ratios.items()
            ],
        )
    path = write_results(
        "bench_imports",
        {
            "benchmark": "bench_imports",
            "machine": info,
            "args": vars(args),
            "total_seconds": total,
            "bare": {"spawn_wall_s": b_wall, "rss_mib": b_rss},
            "entry_points": results,
            "current_over_ref": ref_ratios,
        },
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
