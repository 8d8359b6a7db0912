"""The demo engine reports quota readings of its own (its task's `quota:` line, else its
runtime's `quota` setting), as Claude Code's `rate_limit_event` lines, so `limits`, `capacity
order` and `--route auto` work with no provider. Real daemon, real demo engine processes."""

import time
from pathlib import Path

import pytest

from agent_run.config.model import parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.engines.demo_program import parse_quota

TERMINAL = {"succeeded", "failed", "cancelled", "lost"}


def _run(daemon, workdir: Path, task: str, **params: object) -> dict:
    agent = daemon.call("start", {"task": task, "workdir": str(workdir), **params})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 30})["agent"]
        if view["state"] in TERMINAL:
            return view
    raise AssertionError(f"agent {agent['id']} did not end")


DEMO_RUNTIMES = """schema_version = 1
default_runtime = "fast"
[daemon]
reconcile_interval_seconds = 0.2
[runtimes.fast]
engine = "demo"
models = ["demo-1"]
quota = { "5h" = 80 }
[runtimes.slow]
engine = "demo"
models = ["demo-1"]
quota = { "5h" = 30, "7d" = 90 }
"""


def test_the_demo_engine_reports_quota_so_capacity_works_offline(daemon_for, workdir) -> None:
    home, daemon = daemon_for(DEMO_RUNTIMES)
    assert daemon.call("capacity_order", {})["unavailable_runtimes"] == ["fast", "slow"]
    for runtime in ("fast", "slow"):
        assert _run(daemon, workdir, "answer: ok", runtime=runtime)["state"] == "succeeded"
    windows = {
        (w["runtime"], w["lane"], w["window"]): w for w in daemon.call("limits", {})["windows"]
    }
    assert {key: w["remaining_percent"] for key, w in windows.items()} == {
        ("fast", "default", "5h"): 80.0,
        ("slow", "default", "5h"): 30.0,
        ("slow", "default", "7d"): 90.0,
    }
    assert {w["source"] for w in windows.values()} == {"native"}
    five_hours = windows[("fast", "default", "5h")]["reset_at"]
    assert five_hours % 18000 == 0 and 0 < five_hours - time.time() <= 18000
    # fast: 80 % -> slack 0.6 -> 1.6; slow: 30 % -> slack -0.4 -> 0.6
    order = daemon.call("capacity_order", {})
    assert [(r["runtime"], round(r["priority"], 6)) for r in order["routes"]] == [
        ("fast", 1.6),
        ("slow", 0.6),
    ]
    auto = _run(daemon, workdir, "answer: ok", route="auto", model="demo-1")
    assert auto["execution"]["route"] == "fast/-/default"  # ended: its reading is in
    # a task's own `quota:` line replaces the runtime's: fast now 10 % in 5h, its sonnet lane 50 %
    said = _run(daemon, workdir, "quota: 5h=10 sonnet/7d=50\nanswer: ok", runtime="fast")
    assert said["state"] == "succeeded"
    latest = {
        (w["runtime"], w["lane"], w["window"]): w["remaining_percent"]
        for w in daemon.call("limits", {"runtime": "fast"})["windows"]
    }
    assert latest == {("fast", "default", "5h"): 10.0, ("fast", "sonnet", "7d"): 50.0}
    again = daemon.call("capacity_order", {})
    assert again["routes"][0]["runtime"] == "slow"  # 0.6 over fast's 10 %: 2 x 0.1 - 1 = -0.8


def test_a_quota_that_names_no_window_or_percent_is_refused_naming_it() -> None:
    assert parse_quota(["5h=40", "sonnet/7d=75.5"]) == {"5h": 40.0, "sonnet/7d": 75.5}
    for bad, said in (("6h=40", "5h, 7d"), ("5h=140", "0 to 100"), ("Opus/7d=5", "5h, 7d")):
        with pytest.raises(ValueError, match=said):
            parse_quota([bad])
    head = 'schema_version = 1\ndefault_runtime = "d"\n[runtimes.d]\nengine = "demo"\n'
    with pytest.raises(ConfigInvalid) as refused:
        parse_config(head + 'quota = { "5h" = 140 }\n')
    assert "runtimes.d.quota" in str(refused.value) and "0 to 100" in str(refused.value)
