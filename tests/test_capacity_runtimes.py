"""Which runtimes capacity ranks, through a real daemon: a runtime whose engine CLI is missing is
never ranked nor chosen by `--route auto`, even when it shares an endpoint and a key with a
working one."""

from pathlib import Path

import pytest

from agent_run.domain import errors
from tests.test_capacity_sources import _collector_config


def _broken_and_good(tmp_path: Path) -> str:
    """Two claude runtimes with one endpoint and one key (one credential pool): `good` has its
    CLI (a stand-in that fails at once), `broken` names one that is not there and weighs more."""
    cli = tmp_path / "claude-cli"
    cli.write_text("#!/bin/sh\nexit 1\n")
    cli.chmod(0o755)
    runtimes = ""
    for name, binary, models, weight in (
        ("good", cli, '["m1"]', 1.0),
        ("broken", "/nonexistent/claude", '["m1", "m2"]', 5.0),
    ):
        runtimes += (
            f'[runtimes.{name}]\nengine = "claude"\nbinary = "{binary}"\nmodels = {models}\n'
            f'limits_source = "command"\nauth = {{ env = "SHARED_KEY" }}\n'
            f"priority_multiplier = {weight}\n"
        )
    config = _collector_config("ok", tmp_path / "runs.txt", extra=runtimes)
    # alpha and beta read 80 % and 30 % of their own keys; good and broken 30 % of theirs
    return config


def test_a_runtime_whose_cli_is_missing_is_never_ranked_nor_routed_to(
    daemon_for, tmp_path: Path, workdir: Path
) -> None:
    home, daemon = daemon_for(_broken_and_good(tmp_path))
    collected = {s["runtime"]: s["windows"] for s in daemon.call("capacity_collect", {})["sources"]}
    assert collected["broken"] == 2  # its readings are still the pool's evidence
    order = daemon.call("capacity_order", {})
    shared = next(r for r in order["routes"] if r["runtime"] in ("good", "broken"))
    assert shared["runtime"] == "good" and shared["weight"] == 1.0  # not broken's 5.0
    assert [(a["runtime"], a["weight"]) for a in shared["aliases"]] == [("good", 1.0)]
    assert order["unusable_runtimes"] == [
        {"runtime": "broken", "reason": "/nonexistent/claude not found"}
    ]
    names = {r["runtime"] for r in order["routes"] + order["omitted"] + order["deferred"]}
    assert "broken" not in names and "broken" not in order["unavailable_runtimes"]
    params = {"task": "t", "workdir": str(workdir), "route": "auto"}
    chosen = daemon.call("start", {**params, "model": "m1"})
    assert (chosen["runtime"], chosen["execution"]["route"]) == ("good", "good/-/default")
    with pytest.raises(errors.NoCapacity) as refused:  # only broken offers m2
        daemon.call("start", {**params, "model": "m2"})
    assert refused.value.details["unusable_runtimes"] == ["broken: /nonexistent/claude not found"]
    doctor = {c["check"]: c for c in daemon.call("doctor", {})["checks"]}
    assert doctor["runtime broken"]["level"] == "bad"  # the same judgement doctor makes
