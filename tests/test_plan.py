"""The execution plan is versioned and validated: plans stored before `plan_version` existed
still run, and a plan the supervisor cannot run ends the execution `config_error`."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.config.model import load_config
from agent_run.domain.errors import NotResumable
from agent_run.domain.requests import StartParams
from agent_run.engines.codex import CodexOptions
from agent_run.engines.demo import DemoOptions
from agent_run.engines.plan import PLAN_VERSION, ExecutionPlan, PlanInvalid, load_plan
from agent_run.services.agents import admission_rows
from agent_run.services.context import ServiceContext
from agent_run.store.agents import insert_agent_with_execution
from agent_run.store.db import connect, write
from agent_run.system.home import Home
from tests.harness import DaemonProcess, db_rows, make_home, remove_home, wait_for

# Written by agent-run at ce9fc3e (before plan_version): the prompt in the plan, and every
# runtime key of every engine in runtime_config.
FROZEN_V1_DEMO = (
    '{"agent_id": "AGENT", "execution_id": "EXECUTION", "runtime": "demo", "engine": "demo", "model": "demo-1",'
    ' "workdir": "WORKDIR", "profile": "write", "prompt": "answer: frozen", "runtime_config": {"engine":'
    ' "demo", "enabled": true, "binary": null, "models": ["demo-1"], "default_model": "demo-1", "auth": null,'
    ' "base_url": null, "allow_plain_http_loopback": false, "env": {}, "stall_seconds": null, "wall_seconds":'
    ' null, "max_retries": null, "request_timeout_seconds": null, "retry_give_up_seconds": 120.0},'
    ' "stall_seconds": 600.0, "wall_seconds": null, "cancel_grace_seconds": 5.0, "storage_buffer_bytes":'
    ' 4194304, "storage_wait_seconds": 600.0, "engine_home": "ENGINE_HOME", "read_roots": [], "worker_tools":'
    ' ["finish"]}'
)
FROZEN_V1_CODEX = (
    '{"agent_id": "ag_01m8qw8vr2v0dmfx20", "execution_id": "ex_01m8qw8vr2x9em94nd", "runtime": "keyed",'
    ' "engine": "codex", "model": "gpt-5-codex", "workdir": "/tmp/tmp1uiknl_k/w", "profile": "write", "prompt":'
    ' "answer: frozen", "runtime_config": {"engine": "codex", "enabled": true, "binary": null, "models":'
    ' ["gpt-5-codex"], "default_model": null, "auth": {"env": "OPENAI_API_KEY", "file": null}, "base_url":'
    ' "http://127.0.0.1:9/v1", "allow_plain_http_loopback": true, "env": {}, "stall_seconds": null,'
    ' "wall_seconds": null, "max_retries": 0, "request_timeout_seconds": null, "retry_give_up_seconds": 120.0},'
    ' "stall_seconds": 600.0, "wall_seconds": null, "cancel_grace_seconds": 5.0, "storage_buffer_bytes":'
    ' 4194304, "storage_wait_seconds": 600.0, "engine_home": "/tmp/tmp1uiknl_k/h/homes/keyed/ag_01m8qw8vr2v0dmfx20",'
    ' "read_roots": [], "worker_tools": ["finish"]}'
)


def test_a_version_1_plan_loads_typed_without_its_prompt() -> None:
    plan = load_plan(FROZEN_V1_CODEX)
    assert plan.plan_version == PLAN_VERSION == 3
    options = plan.runtime_config
    assert isinstance(options, CodexOptions)
    assert (options.base_url, options.max_retries, options.auth and options.auth.env) == (
        "http://127.0.0.1:9/v1",
        0,
        "OPENAI_API_KEY",
    )
    assert "prompt" not in plan.model_dump()
    demo = load_plan(FROZEN_V1_DEMO).runtime_config  # its unread HTTP keys are dropped
    assert isinstance(demo, DemoOptions) and "base_url" not in demo.model_dump()


def test_a_plan_round_trips_with_its_engine_options() -> None:
    plan = load_plan(FROZEN_V1_CODEX)
    again = load_plan(plan.to_json())
    assert again == plan and isinstance(again.runtime_config, CodexOptions)
    assert json.loads(plan.to_json())["runtime_config"]["base_url"] == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    "text,field",
    [
        ('{"plan_version": 4}', "plan_version"),
        ("[1, 2]", None),
        ("not json", None),
        (FROZEN_V1_DEMO.replace('"profile": "write"', '"profile": "root"'), "profile"),
        (
            FROZEN_V1_DEMO.replace('"engine": "demo", "enabled"', '"engine": "codex", "enabled"'),
            "runtime_config",
        ),
        (
            FROZEN_V1_DEMO.replace('"engine": "demo", "enabled"', '"engine": "gpt", "enabled"'),
            "runtime_config.engine",
        ),
        (
            FROZEN_V1_DEMO.replace('"stall_seconds": 600.0', '"stall_seconds": "soon"'),
            "stall_seconds",
        ),
    ],
)
def test_a_plan_that_cannot_run_is_refused_naming_the_field(text: str, field: str | None) -> None:
    with pytest.raises(PlanInvalid) as caught:
        load_plan(text)
    assert caught.value.field == field
    if field is not None:
        assert f"`{field}`" in caught.value.message or field == "plan_version"


# -- stored rows, run by the real daemon and supervisors ----------------------------------------


@pytest.fixture
def home_and_workdir() -> Iterator[tuple[Home, Path]]:
    home = make_home()
    workdir = home.root.parent / "work"
    workdir.mkdir()
    try:
        yield home, workdir
    finally:
        remove_home(home)


def admit_with_plan(home: Home, workdir: Path, task: str, plan_json: str | None) -> tuple[str, str]:
    """Commit an agent as `start` does but with `plan_json` as its stored plan (placeholders
    AGENT, EXECUTION, WORKDIR, ENGINE_HOME filled in); spawn nothing. (agent id, execution id)"""
    ctx = ServiceContext(home, load_config(home), threads=1)
    try:
        agent_row, execution = admission_rows(ctx, StartParams(task=task, workdir=str(workdir)))
    finally:
        ctx.shutdown()
    built: ExecutionPlan = ExecutionPlan.model_validate(execution["plan"])
    if plan_json is not None:
        for placeholder, value in (
            ("AGENT", agent_row["id"]),
            ("EXECUTION", execution["id"]),
            ("WORKDIR", built.workdir),
            ("ENGINE_HOME", built.engine_home),
        ):
            plan_json = plan_json.replace(f'"{placeholder}"', json.dumps(value))
        execution["plan"] = json.loads(plan_json)
    conn = connect(home.db_path)
    try:
        with write(conn):
            insert_agent_with_execution(conn, agent=agent_row, execution=execution)
    finally:
        conn.close()
    home.execution_dir(agent_row["id"], execution["id"]).mkdir(parents=True, exist_ok=True)
    return agent_row["id"], execution["id"]


def test_an_execution_stored_with_a_version_1_plan_runs_and_resumes(home_and_workdir) -> None:
    home, workdir = home_and_workdir
    agent_id, _ = admit_with_plan(home, workdir, "answer: frozen", FROZEN_V1_DEMO)
    daemon = DaemonProcess(home).start()  # reconciliation spawns the never-spawned row
    try:
        done = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 90})["agent"]
        assert done["state"] == "succeeded", done
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == "frozen"
        daemon.call("resume", {"agent_id": agent_id, "prompt": "answer: thawed"})
        done = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 90})["agent"]
        assert done["state"] == "succeeded", done
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == "thawed"
    finally:
        daemon.stop()
    plans = [
        json.loads(r["plan_json"])
        for r in db_rows(home, "SELECT plan_json FROM executions ORDER BY number")
    ]
    assert (
        "plan_version" not in plans[0]
        and plans[1]["plan_version"] == PLAN_VERSION
        and "prompt" not in plans[1]
    )


def test_a_plan_the_supervisor_cannot_run_ends_the_execution_config_error(home_and_workdir) -> None:
    home, workdir = home_and_workdir
    plan = json.loads(load_plan(FROZEN_V1_DEMO).to_json())
    plan["runtime_config"]["colour"] = "red"  # a key no demo runtime has
    bad = json.dumps(plan)
    agent_id, execution_id = admit_with_plan(home, workdir, "answer: never", bad)
    daemon = DaemonProcess(home).start()
    try:
        wait_for(
            lambda: db_rows(home, "SELECT state FROM executions")[0]["state"] == "failed",
            timeout=90,
            what="the execution to fail",
        )
        row = db_rows(home, "SELECT failure_kind, failure_message, supervisor_pid FROM executions")[
            0
        ]
        assert row["failure_kind"] == "config_error", dict(row)
        assert "runtime_config.colour" in row["failure_message"]
        assert "Traceback" not in row["failure_message"]
        # Had its engine reported a session, a resume would still not copy the bad plan.
        conn = connect(home.db_path)
        with write(conn):
            conn.execute(
                "UPDATE executions SET engine_session_id = 'sess-1' WHERE id = ?", (execution_id,)
            )
        conn.close()
        with pytest.raises(NotResumable) as caught:
            with daemon.client() as client:
                client.call("resume", {"agent_id": agent_id, "prompt": "answer: again"})
        assert "runtime_config.colour" in str(caught.value)
    finally:
        daemon.stop()
    assert len(db_rows(home, "SELECT id FROM executions")) == 1


def test_a_version_2_plan_loads_as_version_3_without_a_commit_branch() -> None:
    v2 = json.loads(load_plan(FROZEN_V1_DEMO).to_json()) | {"plan_version": 2}
    del v2["commit_branch"]
    plan = load_plan(json.dumps(v2))
    assert plan.plan_version == 3 and plan.commit_branch is None
