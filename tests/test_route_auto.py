"""`start --route auto` and `batch start --route auto`: the top route of capacity_order at
admission among the runtimes offering the model (or a model class's pairs), recorded on the
execution with its reason; a typed NoCapacity refusal when no route has fresh capacity. Real
daemon, real `command` collector process, real SQLite."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.domain import errors
from agent_run.system.home import Home
from tests.harness import DaemonProcess, cli, cli_json, db_rows, make_home, remove_home
from tests.test_capacity_sources import _collector_config


@pytest.fixture
def collected(tmp_path: Path) -> Iterator:
    started: list[tuple[Home, DaemonProcess]] = []

    def start(mode: str, extra: str = "") -> tuple[Home, DaemonProcess]:
        home = make_home(_collector_config(mode, tmp_path / "runs.txt", extra=extra))
        daemon = DaemonProcess(home, env={"ALPHA_KEY": "key-a", "BETA_KEY": "key-b"}).start()
        started.append((home, daemon))
        daemon.call("capacity_collect", {})
        return home, daemon

    yield start
    for home, daemon in started:
        daemon.stop()
        remove_home(home)


def _auto(daemon: DaemonProcess, workdir: Path, **extra: object) -> dict:
    params = {"task": "t", "workdir": str(workdir), "route": "auto", **extra}
    return daemon.call("start", params)


def test_route_auto_picks_the_better_route_and_records_why(collected, workdir) -> None:
    home, daemon = collected("ok")  # beta 1.8 (x3 weight) ahead of alpha 1.6
    view = _auto(daemon, workdir, model="demo-1")
    assert (view["runtime"], view["model"], view["account"]) == ("beta", "demo-1", None)
    execution = view["execution"]
    assert execution["route"] == "beta/-/default"
    assert (
        "priority 1.80" in execution["route_reason"]
        and "5h at 30 % left" in (execution["route_reason"])
    )
    shown = daemon.call("agent", {"agent_id": view["id"]})["execution"]
    assert shown["route"] == "beta/-/default"
    listed = {a["id"]: a["route"] for a in daemon.call("list_agents", {})["items"]}
    assert listed[view["id"]] == "beta/-/default"
    text = cli(home, "agent", view["id"], "--format", "text").stdout
    assert "route   beta/-/default (top of capacity_order among 2 ranked route(s)" in text
    # the CLI flag, and --min-remaining: beta's 30 % is not above 50, alpha's 80 % is
    by_cli = cli_json(
        home,
        "start",
        "--task",
        "t",
        "--workdir",
        str(workdir),
        "--route",
        "auto",
        "--model",
        "demo-1",
        "--min-remaining",
        "50",
    )
    assert by_cli["runtime"] == "alpha" and by_cli["execution"]["route"] == "alpha/-/default"


def test_route_auto_refuses_when_every_route_is_exhausted(collected, workdir) -> None:
    home, daemon = collected("exhausted")
    with pytest.raises(errors.NoCapacity) as refused:
        _auto(daemon, workdir, model="demo-1")
    assert refused.value.field == "route"
    assert refused.value.details["omitted"] == [
        "alpha/-/default: window 5h is exhausted (0 % left)",
        "beta/-/default: window 5h is exhausted (0 % left)",
    ]
    assert refused.value.details["labels"] == {
        "alpha/-/default": "exhausted",
        "beta/-/default": "exhausted",
    }
    assert db_rows(home, "SELECT id FROM agents") == []  # nothing admitted
    result = cli(
        home,
        "start",
        "--task",
        "t",
        "--workdir",
        str(workdir),
        "--route",
        "auto",
        "--model",
        "demo-1",
    )
    assert result.returncode != 0 and "NoCapacity" in result.stderr + result.stdout


def test_route_auto_never_picks_a_deferred_route(collected, workdir) -> None:
    home, daemon = collected("beta_stale")  # beta: 95 % (x3) but stale; alpha: 40 %, fresh
    order = daemon.call("capacity_order", {})
    assert [(d["runtime"], d["lane"]) for d in order["deferred"]] == [("beta", "default")]
    view = _auto(daemon, workdir, model="demo-1")
    assert view["execution"]["route"] == "alpha/-/default"
    with pytest.raises(errors.NoCapacity) as refused:  # alpha's 40 % is not above 60
        _auto(daemon, workdir, model="demo-1", min_remaining=60.0)
    assert refused.value.details["deferred"] and refused.value.details["below_min_remaining"]


def test_route_auto_with_a_model_class_chooses_among_its_pairs(collected, workdir) -> None:
    classes = '[model_classes]\ncheap = ["alpha:demo-1", "beta:demo-1"]\nsolo = ["alpha:demo-1"]\n'
    home, daemon = collected("ok", extra=classes)
    view = _auto(daemon, workdir, model_class="cheap")  # beta 1.8 (x3) ahead of alpha 1.6
    assert (view["runtime"], view["model"], view["execution"]["route"]) == (
        "beta",
        "demo-1",
        "beta/-/default",
    )
    solo = _auto(daemon, workdir, model_class="solo")  # beta is better, but not in this class
    assert (solo["runtime"], solo["execution"]["route"]) == ("alpha", "alpha/-/default")
    with pytest.raises(errors.InvalidRequest) as unknown:
        _auto(daemon, workdir, model_class="dear")
    assert unknown.value.field == "model_class" and "cheap" in unknown.value.message


@pytest.mark.parametrize(
    "params,field",
    [
        ({"route": "auto", "model": "demo-1", "runtime": "alpha"}, "runtime"),
        ({"route": "auto", "model": "nope"}, "model"),
        ({"route": "auto"}, "model"),
        ({"model": "demo-1", "min_remaining": 5.0}, "min_remaining"),
        ({"model_class": "cheap"}, "model_class"),
    ],
)
def test_route_auto_request_faults_name_the_field(collected, workdir, params, field) -> None:
    home, daemon = collected("ok")
    with pytest.raises(errors.InvalidRequest) as refused:
        daemon.call("start", {"task": "t", "workdir": str(workdir), **params})
    assert refused.value.field == field
    assert db_rows(home, "SELECT id FROM agents") == []


def test_an_idempotent_retry_of_an_auto_route_returns_the_same_agent(collected, workdir) -> None:
    home, daemon = collected("ok")
    first = _auto(daemon, workdir, model="demo-1", request_id="r-1")
    again = _auto(daemon, workdir, model="demo-1", request_id="r-1")
    assert again["id"] == first["id"]


def test_batch_start_route_auto_routes_each_run_at_its_admission(collected) -> None:
    from tests.batch_harness import make_repo, runs_of, wait_batch

    home, daemon = collected("ok")
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": 2,
            "prompt": "answer: done",
            "route": "auto",
            "model": "demo-1",
        },
    )
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "completed", done
    routes = [
        daemon.call("agent", {"agent_id": r["agent_id"]})["execution"]["route"]
        for r in runs_of(done, "worker")
    ]
    assert routes == ["beta/-/default", "beta/-/default"]
    assert [r["route"] for r in done["runs"]] == routes  # shown on the batch view too
    text = cli(home, "batch", "show", done["id"], "--format", "text").stdout
    assert text.count("route beta/-/default") == 2, text
    with pytest.raises(errors.InvalidRequest) as refused:  # checked before any row exists
        daemon.call(
            "batch_start",
            {
                "workflow": "repeated",
                "project": str(repo),
                "runs": 1,
                "prompt": "p",
                "route": "auto",
                "model": "nope",
            },
        )
    assert refused.value.field == "model"


def test_a_quota_failure_advises_the_next_viable_route_never_switching(collected, workdir) -> None:
    home, daemon = collected("ok")  # beta ranks first, then alpha
    started = daemon.call(
        "start", {"task": "fail: quota", "workdir": str(workdir), "runtime": "beta"}
    )
    done = daemon.call("wait", {"agent_id": started["id"], "timeout_seconds": 60})["agent"]
    execution = done["execution"]
    assert execution["failure_kind"] == "quota_exhausted", execution
    assert "Next viable route (capacity_order): alpha/-/default" in execution["failure_advice"]
    assert "--runtime alpha --model demo-1" in execution["failure_advice"]
    assert done["runtime"] == "beta" and execution["account"] is None  # the run kept its route
    shown = daemon.call("agent", {"agent_id": started["id"]})["execution"]["failure_advice"]
    assert shown == execution["failure_advice"]


def test_route_auto_never_picks_an_account_whose_account_wide_window_is_exhausted(
    tmp_path: Path, workdir: Path
) -> None:
    """alpha: account-wide 5h at 0 %, its sonnet 7d at 50 % (score 1.0); beta: 5h at 10 % (score
    0.2 x 3 = 0.6). A sonnet model spends alpha's sonnet lane *and* its exhausted 5h window: the
    route goes to beta, and `capacity_order` omits every alpha route."""
    config = _collector_config("lanes", tmp_path / "runs.txt").replace(
        'models = ["demo-1"]', 'models = ["demo-1", "demo-sonnet"]'
    )
    home = make_home(config)
    daemon = DaemonProcess(home, env={"ALPHA_KEY": "key-a", "BETA_KEY": "key-b"}).start()
    try:
        daemon.call("capacity_collect", {})
        order = daemon.call("capacity_order", {})
        assert [(r["runtime"], r["lane"]) for r in order["routes"]] == [("beta", "default")]
        assert {(o["runtime"], o["lane"]): o["reason"] for o in order["omitted"]} == {
            ("alpha", "default"): "window 5h is exhausted (0 % left)",
            ("alpha", "sonnet"): "window default/5h is exhausted (0 % left)",
        }
        view = _auto(daemon, workdir, model="demo-sonnet")
        assert (view["runtime"], view["execution"]["route"]) == ("beta", "beta/-/default")
        with pytest.raises(errors.NoCapacity) as refused:  # beta's 10 % is not above 20
            _auto(daemon, workdir, model="demo-sonnet", min_remaining=20.0)
        assert refused.value.details["omitted"] == [
            "alpha/-/sonnet: window default/5h is exhausted (0 % left)"
        ]
    finally:
        daemon.stop()
        remove_home(home)
