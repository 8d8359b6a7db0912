"""Shared helpers for the benchmarks: paths, config, a daemon in a fresh home, stats, output.

Not a benchmark itself. Each bench_*.py imports this (the script's own folder is on sys.path).
"""

import contextlib
import json
import math
import os
import platform
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for tests.harness (src is installed in the uv venv)

from tests.harness import (  # noqa: E402
    DaemonProcess,
    db_rows,
    kill_leftovers,
    make_home,
    remove_home,
    short_tmpdir,
    wait_for,
)

# The harness's TEST_CONFIG, but with the *default* reconcile interval (2 s), not the tests' 0.2 s.
BENCH_CONFIG = """schema_version = 1
default_runtime = "demo"
[supervisor]
stall_seconds = 60.0
cancel_grace_seconds = 1.0
[daemon]
reconcile_interval_seconds = 2.0
[runtimes.demo]
engine = "demo"
models = ["demo-1"]
default_model = "demo-1"
"""

# BENCH_SUPERVISOR_NICE=N runs the agents at `[supervisor] nice = N` (default: the product's
# default, 5), for a before/after of agents yielding the CPU.
if os.environ.get("BENCH_SUPERVISOR_NICE"):
    BENCH_CONFIG = BENCH_CONFIG.replace(
        "[supervisor]\n", f"[supervisor]\nnice = {int(os.environ['BENCH_SUPERVISOR_NICE'])}\n"
    )

TERMINAL = {"succeeded", "failed", "cancelled", "lost"}


# -- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), like numpy's default."""
    if not values:
        return math.nan
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "min": min(values) if values else math.nan,
        "max": max(values) if values else math.nan,
        "mean": sum(values) / len(values) if values else math.nan,
    }


def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


# -- output ---------------------------------------------------------------------------------------


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def source_state() -> dict[str, Any]:
    """The commit and the locally modified files under src/ (others may be editing it)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": git("rev-parse", "HEAD"),
        "src_changes": git("status", "--short", "--", "src").splitlines(),
    }


def machine_info() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "source": source_state(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": load,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


# -- environment ------------------------------------------------------------------------------------


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, _frame: object) -> None:
    raise _Terminated(f"signal {signum}")


@contextlib.contextmanager
def daemon_env(
    config: str = BENCH_CONFIG,
    env: dict[str, str] | None = None,
    fresh: bool = False,
) -> Iterator[tuple[Any, DaemonProcess, Path]]:
    """(home, daemon, workdir): a real daemon in a fresh temp home; everything torn down after.
    `fresh`: the daemon is a fresh `python -m agent_run api serve`, as a user's is, not a fork of
    the tests' pre-imported process (whose padded command line lets it fork its zygote at boot).

    Cleanup runs on normal exit, on exceptions, on Ctrl-C and on SIGTERM: every supervisor and
    engine group the home recorded is killed, the daemon stopped, the temp dirs removed.
    """
    old_term = signal.signal(signal.SIGTERM, _raise_terminated)
    home = make_home(config)
    workdir = short_tmpdir("arb-")
    daemon = DaemonProcess(home, env=env, fresh=fresh)
    try:
        daemon.start()
        yield home, daemon, workdir
    finally:
        try:
            kill_leftovers(home)
        finally:
            daemon.stop()
            remove_home(home)
            shutil.rmtree(workdir, ignore_errors=True)
            signal.signal(signal.SIGTERM, old_term)


def pycache_env(enabled: bool) -> tuple[dict[str, str], Path | None]:
    """Environment overrides that turn on a private bytecode cache (or change nothing).

    This machine's environment sets PYTHONDONTWRITEBYTECODE=1, and the package is an editable
    install of src/ with no __pycache__, so by default every supervisor compiles agent_run's
    modules from source at each start. With `enabled`, children write and reuse .pyc files
    under a temp PYTHONPYCACHEPREFIX instead (src/ stays untouched).
    """
    if not enabled:
        return {}, None
    prefix = short_tmpdir("arpyc-")
    return {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(prefix)}, prefix


@contextlib.contextmanager
def ref_tree(commit: str | None) -> Iterator[dict[str, str] | None]:
    """Environment overrides that run COMMIT's src/ (git archive into a temp dir, through
    PYTHONPATH, which precedes the editable install), or None without a commit."""
    import subprocess
    import tempfile

    if not commit:
        yield None
        return
    tmp = tempfile.mkdtemp(prefix="arref-")
    try:
        archive = subprocess.run(
            ["git", "archive", commit, "src"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield {"PYTHONPATH": os.path.join(tmp, "src")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def zygote_ready(home: Any) -> bool:
    """The home's supervisor fork server has said it is ready (its log)."""
    log = home.logs_dir / "zygote.log"
    return log.exists() and "zygote ready" in log.read_text()


def memory_mib(pid: int) -> tuple[float, float] | None:
    """(VmRSS, Pss) in MiB from /proc, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            pss = next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return None
    return rss / 1024, pss / 1024


def wait_all_terminal(
    home: Any, agent_ids: Sequence[str], timeout: float = 120.0
) -> dict[str, str]:
    """Poll the database (not the daemon) until every agent's latest execution is terminal."""
    wanted = set(agent_ids)

    def states() -> dict[str, str] | None:
        rows = db_rows(home, "SELECT agent_id, state FROM executions")
        got = {r["agent_id"]: r["state"] for r in rows if r["agent_id"] in wanted}
        if len(got) == len(wanted) and all(s in TERMINAL for s in got.values()):
            return got
        return None

    return wait_for(states, timeout=timeout, interval=0.05, what="agents to end")


__all__ = [
    "BENCH_CONFIG",
    "DaemonProcess",
    "ROOT",
    "TERMINAL",
    "daemon_env",
    "db_rows",
    "kill_leftovers",
    "machine_info",
    "make_home",
    "memory_mib",
    "pycache_env",
    "ref_tree",
    "print_table",
    "ratio",
    "remove_home",
    "summary",
    "wait_all_terminal",
    "wait_for",
    "write_results",
    "percentile",
]
