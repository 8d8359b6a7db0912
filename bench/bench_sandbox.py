"""Start-up cost of the engine sandbox: the demo engine spawned, fed one user message and read
to its `result` line, bare (what `sandbox = "none"` runs) vs the engine in the bubblewrap argv
the supervisor builds under `sandbox = "bubblewrap"` (`engines.sandbox.sandbox_argv`), which is
what a start costs now; also with the probe that bwrap can start (`require_sandbox`, one bwrap
of its own) before it, what every start cost until the probe ran only after an engine died
without a word; interleaved, first pass discarded. And `bwrap ... true` vs `true` for the
sandbox's own floor.

Run:  uv run python bench/bench_sandbox.py [--samples 30]
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_info, print_table, ratio, summary, write_results

from agent_run.engines.plan import load_plan
from agent_run.engines.sandbox import require_sandbox, sandbox_argv

MESSAGE = json.dumps({"type": "user", "message": {"role": "user", "content": "answer: x"}})


def demo_plan(workdir: Path, engine_home: Path):
    """The execution plan of a demo agent with the `write` profile in `workdir`."""
    return load_plan(
        json.dumps(
            {
                "agent_id": "ag_bench",
                "execution_id": "ex_bench",
                "runtime": "demo",
                "engine": "demo",
                "model": "demo-1",
                "workdir": str(workdir),
                "profile": "write",
                "runtime_config": {"engine": "demo"},
                "stall_seconds": 60.0,
                "cancel_grace_seconds": 1.0,
                "engine_home": str(engine_home),
            }
        )
    )


def sandboxed_demo_argv(workdir: Path, engine_home: Path, env: dict[str, str], box: Path):
    """The demo engine's argv in the bubblewrap sandbox the supervisor builds for it."""
    bare = [sys.executable, "-m", "agent_run.engines.demo_program", "--model", "demo-1"]
    return sandbox_argv(demo_plan(workdir, engine_home), bare, env, box, box / "agent-run-home")


def demo_sample(argv: list[str], env: dict[str, str], cwd: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin and proc.stdout
    proc.stdin.write(MESSAGE.encode() + b"\n")
    proc.stdin.close()
    for line in proc.stdout:
        if b'"type": "result"' in line or b'"type":"result"' in line:
            break
    else:
        raise RuntimeError(f"no result from {argv[:3]}")
    wall = time.perf_counter() - t0
    proc.wait()
    return wall


def supervised_sample(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """The supervisor's path: the probe, then the sandboxed engine to its result."""
    t0 = time.perf_counter()
    require_sandbox()
    return time.perf_counter() - t0 + demo_sample(argv, env, cwd)


def spawn_sample(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arbs-", dir="/tmp"))
    workdir, home, box = root / "w", root / "home", root / "sandbox"
    agent_run_home = root / "agent-run-home"  # masked if a bind showed it; none does here
    for folder in (workdir, home, box):
        folder.mkdir()
    bare = [sys.executable, "-m", "agent_run.engines.demo_program", "--model", "demo-1"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    plan = demo_plan(workdir, home)
    boxed = sandbox_argv(plan, bare, env, box, agent_run_home)
    true_boxed = sandbox_argv(plan, ["/bin/true"], env, box, agent_run_home)
    names = ("bare", "supervised", "sandboxed", "true", "bwrap_true")
    samples: dict[str, list[float]] = {k: [] for k in names}
    try:
        for i in range(args.samples + 1):
            row = {
                "bare": demo_sample(bare, env, str(workdir)),
                "supervised": supervised_sample(boxed, env, str(workdir)),
                "sandboxed": demo_sample(boxed, env, str(workdir)),
                "true": spawn_sample(["/bin/true"]),
                "bwrap_true": spawn_sample(true_boxed),
            }
            if i:  # the first pass warms caches
                for key, value in row.items():
                    samples[key].append(value)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    stats = {name: summary(values) for name, values in samples.items()}
    ratios = {
        "probe+sandboxed/bare demo engine p50": ratio(
            stats["supervised"]["p50"], stats["bare"]["p50"]
        ),
        "added ms p50 (probe + sandbox)": 1000
        * (stats["supervised"]["p50"] - stats["bare"]["p50"]),
        "sandboxed/bare demo engine p50 (no probe)": ratio(
            stats["sandboxed"]["p50"], stats["bare"]["p50"]
        ),
        "bwrap true/true p50": ratio(stats["bwrap_true"]["p50"], stats["true"]["p50"]),
    }
    print_table(
        ["what", "p50 ms", "p95 ms"],
        [[k, 1000 * v["p50"], 1000 * v["p95"]] for k, v in stats.items()],
    )
    print_table(["ratio", "value"], [[k, v] for k, v in ratios.items()])
    path = write_results(
        "sandbox",
        {
            "machine": machine_info(),
            "summary": stats,
            "ratios": ratios,
            "samples": samples,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
