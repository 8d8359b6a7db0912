"""The engine registry: built-ins are specs loaded like plug-ins; a plug-in engine defined in
the test suite (`tests/support/fake_engine.py`, no change in src/) is installed through an
entry point and runs agents end to end through the real daemon and supervisors."""

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.config import parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.engines.registry import (
    BUILTIN_ENGINES,
    ENTRY_POINT_GROUP,
    EngineSpec,
    engine_names,
    engine_spec,
    register,
)
from agent_run.home import Home
from tests.harness import DaemonProcess, db_rows, make_home, remove_home, short_tmpdir
from tests.support import fake_engine

REPO = Path(__file__).resolve().parent.parent
ECHO_CONFIG = """schema_version = 1
default_runtime = "echo"
[supervisor]
stall_seconds = 60.0
cancel_grace_seconds = 1.0
[daemon]
reconcile_interval_seconds = 0.2
[runtimes.echo]
engine = "echo"
models = ["echo-1"]
greeting = "hi there"
"""


def install_entry_point(site: Path) -> None:
    """What `pip install` of a plug-in leaves behind: a dist-info declaring the entry point."""
    dist = site / "agent_run_echo_engine-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: agent-run-echo-engine\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\necho = tests.support.fake_engine:SPEC\n"
    )


@pytest.fixture
def plugin_daemon() -> Iterator[tuple[Home, DaemonProcess, Path]]:
    home = make_home(ECHO_CONFIG)
    site = short_tmpdir("art-site-")
    install_entry_point(site)
    workdir = home.root.parent / "work"
    workdir.mkdir()
    path = os.pathsep.join(p for p in (str(site), str(REPO), os.environ.get("PYTHONPATH")) if p)
    daemon = DaemonProcess(home, env={"PYTHONPATH": path}).start()
    try:
        yield home, daemon, workdir
    finally:
        daemon.stop()
        remove_home(home)


def test_a_plugin_engine_runs_and_resumes_an_agent_through_the_daemon(plugin_daemon) -> None:
    home, daemon, workdir = plugin_daemon
    agent = daemon.call("start", {"task": "ping", "workdir": str(workdir)})
    assert agent["engine"] == "echo"
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "succeeded", done
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "hi there: ping"
    plan = json.loads(db_rows(home, "SELECT plan_json FROM executions")[0]["plan_json"])
    assert plan["plan_version"] == 2 and "prompt" not in plan
    assert plan["runtime_config"]["greeting"] == "hi there"  # the engine's own option, typed

    daemon.call("resume", {"agent_id": agent["id"], "prompt": "again"})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "succeeded", done
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "hi there: again"
    rows = db_rows(home, "SELECT plan_json, engine_session_id FROM executions ORDER BY number")
    assert json.loads(rows[1]["plan_json"])["resume_session_id"] == rows[0]["engine_session_id"]


def test_a_registered_engine_gets_its_own_typed_options_and_refuses_others() -> None:
    register(fake_engine.SPEC)  # the in-process way; the daemon above reads the entry point
    config = parse_config(ECHO_CONFIG)
    options = config.runtimes["echo"]
    assert isinstance(options, fake_engine.EchoOptions) and options.greeting == "hi there"
    with pytest.raises(ConfigInvalid) as caught:  # an HTTP engine's key is not the echo engine's
        parse_config(ECHO_CONFIG + 'base_url = "https://example.com"\n')
    assert caught.value.field == "runtimes.echo.base_url"
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(ECHO_CONFIG.replace('greeting = "hi there"', "greeting = 3"))
    assert caught.value.field == "runtimes.echo.greeting"


def test_a_runtime_takes_only_its_own_engines_keys() -> None:
    demo = 'schema_version = 1\n[runtimes.demo]\nengine = "demo"\n'
    with pytest.raises(ConfigInvalid) as caught:  # the demo calls no provider
        parse_config(demo + 'base_url = "https://example.com"\n')
    assert caught.value.field == "runtimes.demo.base_url"
    codex = parse_config(
        'schema_version = 1\ndefault_runtime = "codex"\n[runtimes.codex]\n'
        'engine = "codex"\nmax_retries = 2\n'
    ).runtimes["codex"]
    assert codex.model_dump()["max_retries"] == 2
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(demo.replace('"demo"', '"gpt"'))
    assert caught.value.field == "runtimes.demo.engine" and "'gpt'" in caught.value.message


def test_builtin_engines_are_specs_named_by_entry_point_targets() -> None:
    assert engine_names()[:5] == ["demo", "codex", "claude", "glm", "qwen"]
    for name, target in BUILTIN_ENGINES.items():
        spec = engine_spec(name)
        assert isinstance(spec, EngineSpec) and spec.name == name, target
        assert spec.options.model_fields["engine"].annotation.__args__ == (name,)  # Literal[name]
        assert spec.factory().name == name
    assert engine_spec("codex").steer_opens_turn is False  # turn/steer joins the running turn
    assert (
        engine_spec("demo").broker_upstream is None and engine_spec("demo").default_binary is None
    )
    assert engine_spec("glm").default_binary == "claude"


def test_a_second_spec_under_a_taken_name_is_refused() -> None:
    impostor = EngineSpec(
        name="demo",
        factory=fake_engine.EchoEngine,
        options=fake_engine.EchoOptions,
        summary="not the demo",
    )
    with pytest.raises(ValueError, match="registered twice"):
        register(impostor)
    assert engine_spec("demo").summary != "not the demo"
