"""A capacity source cannot stall collection (issue 35, item 6): a collector that answers and
exits while a detached child of its (a session of its own) holds its stdout open is done when it
exits, and the child is ended; each source's samples are stored as they arrive, so a slow source
delays no other. Real daemons, real collector processes, real process identities."""

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from agent_run.services.collector_process import run_bounded
from agent_run.system.processes import Liveness, ProcessIdentity, current
from tests.harness import short_tmpdir, wait_for
from tests.test_capacity_sources import _collector_config, _fake_appserver


def _detached_child(folder: Path) -> ProcessIdentity:
    pid, ticks, boot = json.loads((folder / "detached.json").read_text())
    return ProcessIdentity(pid, ticks, boot)


def _ended(child: ProcessIdentity) -> None:
    try:
        wait_for(
            lambda: current().liveness(child) == Liveness.DEAD,
            timeout=60,
            what="the detached child to be ended",
        )
    except AssertionError:
        if current().liveness(child) == Liveness.ALIVE:  # not left for ten minutes
            os.kill(child.pid, signal.SIGKILL)
        raise


def test_a_detached_child_holding_stdout_neither_stalls_the_collector_nor_outlives_it(
    daemon_for, tmp_path: Path
) -> None:
    # alpha's collector prints a valid answer, starts a child in a new session that keeps its
    # stdout open for ten minutes, and exits; beta's answers plainly
    home, daemon = daemon_for(_collector_config("detached", tmp_path / "runs.txt", deadline=120))
    started = time.monotonic()
    sources = {s["runtime"]: s for s in daemon.call("capacity_collect", {})["sources"]}
    took = time.monotonic() - started
    assert sources["alpha"]["error"] is None and sources["alpha"]["windows"] == 2, sources
    assert sources["beta"]["error"] is None and sources["beta"]["windows"] == 2
    assert took < 60, f"the collect waited on the child's stdout: {took:.1f} s"  # deadline 120
    limits = {(w["runtime"], w["window"]) for w in daemon.call("limits", {})["windows"]}
    assert ("alpha", "5h") in limits and ("beta", "5h") in limits
    _ended(_detached_child(tmp_path))


def test_the_app_server_source_is_bounded_the_same_way(daemon_for) -> None:
    tmp = short_tmpdir()
    codex_home = tmp / "codex-home"
    codex_home.mkdir()
    config = f"""schema_version = 1
default_runtime = "cx"
[capacity]
collect_interval_seconds = 3600
[runtimes.cx]
engine = "codex"
models = ["gpt-test"]
binary = "{_fake_appserver(tmp, "detached")}"
limits_source = "codex_appserver"
auth = {{ login = "native", dir = "{codex_home}" }}
"""
    home, daemon = daemon_for(config)
    started = time.monotonic()
    (source,) = daemon.call("capacity_collect", {})["sources"]
    assert source["error"] is None and source["windows"] == 2, source
    assert time.monotonic() - started < 25  # its own deadline is 30 s; the child lives 600 s
    _ended(_detached_child(codex_home))


def test_each_source_is_stored_as_it_answers_while_another_is_still_out(
    daemon_for, tmp_path: Path
) -> None:
    # alpha's collector answers only once the test releases it; beta's at once
    home, daemon = daemon_for(_collector_config("alpha_waits", tmp_path / "runs.txt", deadline=300))
    result: dict = {}
    collecting = threading.Thread(
        target=lambda: result.update(daemon.call("capacity_collect", {})), daemon=True
    )
    collecting.start()
    try:
        wait_for(
            lambda: {w["runtime"] for w in daemon.call("limits", {})["windows"]} == {"beta"},
            timeout=120,
            what="beta's readings stored while alpha's collector is still running",
        )
        assert collecting.is_alive() and not result  # alpha is still out
    finally:
        (tmp_path / "release").touch()
    collecting.join(timeout=300)
    assert [s["windows"] for s in result["sources"]] == [2, 2]
    assert {w["runtime"] for w in daemon.call("limits", {})["windows"]} == {"alpha", "beta"}


def test_a_program_stopped_while_it_runs_is_ended_with_its_detached_child(tmp_path: Path) -> None:
    """The stop path (a deadline, or an app-server that has answered): the reaper is told to
    stop while the program still runs; it ends the program and the child that left for a
    session of its own."""
    script = tmp_path / "hang.py"
    script.write_text(
        "import json, os, sys, time\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from fake_collectors import leave_a_detached_child\n"
        "from pathlib import Path\n"
        "from agent_run.system.processes import ProcessIdentity\n"
        "me = ProcessIdentity.current()\n"
        "Path(sys.argv[2], 'program.json').write_text(json.dumps([me.pid, me.start_ticks, me.boot_id]))\n"
        "leave_a_detached_child(Path(sys.argv[2]))\n"
        "print('partial', flush=True)\n"
        "time.sleep(600)\n"
    )
    support = Path(__file__).parent / "support"
    env = {"PATH": os.environ["PATH"]}
    ready = tmp_path / "detached.json"
    run = asyncio.run(
        run_bounded(
            [sys.executable, str(script), str(support), str(tmp_path)],
            b"",
            env,
            30.0,
            1 << 20,
            done=lambda _chunk: ready.exists(),
        )
    )
    assert run.ending == "done" and run.status is None and run.output == b"partial\n"
    program = json.loads((tmp_path / "program.json").read_text())
    _ended(ProcessIdentity(*program))
    _ended(_detached_child(tmp_path))
