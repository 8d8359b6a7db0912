"""The engine registry: built-ins are specs loaded like plug-ins; a plug-in engine defined in
the test suite (`tests/support/fake_engine.py`, no change in src/) is installed through an
entry point and runs agents end to end through the real daemon and supervisors."""

import ast
import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent_run.config.init_file import render_init_config
from agent_run.config.model import parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.engines import registry
from agent_run.engines.registry import (
    BUILTIN_ENGINES,
    ENTRY_POINT_GROUP,
    EngineSpec,
    UnknownEngine,
    engine_names,
    engine_spec,
    register,
)
from agent_run.system.home import Home
from tests.harness import DaemonProcess, cli, db_rows, make_home, remove_home, short_tmpdir
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
# The plug-in is imported from the test tree through PYTHONPATH, which no sandbox binds (an
# installed plug-in lives in the bound environment): this test is about the registry.
sandbox = "none"
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


def plugin_path(site: Path) -> str:
    """PYTHONPATH for a process that should find the plug-in (the daemon, the CLI)."""
    return os.pathsep.join(p for p in (str(site), str(REPO), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture
def plugin_daemon() -> Iterator[tuple[Home, DaemonProcess, Path]]:
    home = make_home(ECHO_CONFIG)
    site = short_tmpdir("art-site-")
    install_entry_point(site)
    workdir = home.root.parent / "work"
    workdir.mkdir()
    daemon = DaemonProcess(home, env={"PYTHONPATH": plugin_path(site)}).start()
    try:
        yield home, daemon, workdir
    finally:
        daemon.stop()
        remove_home(home)


def login_binary(folder: Path) -> Path:
    """The echo engine's `binary`: its own sign-in command (`fake_engine_login.py`)."""
    binary = folder / "echo-engine"
    program = REPO / "tests" / "support" / "fake_engine_login.py"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {program} "$@"\n')
    binary.chmod(0o755)
    return binary


def files_holding(root: Path, text: str) -> list[Path]:
    """Regular files under `root` (links not followed) whose bytes hold `text`."""
    found = []
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink() and text.encode() in path.read_bytes():
                found.append(path)
    return found


def test_a_plugin_engines_native_sign_in_works_with_no_change_in_src() -> None:
    """The fake engine declares a `SignIn` in its spec and nothing else: config takes its native
    login, a run without the file ends `auth_failed` naming `agent-run login`, `login` runs its
    own sign-in command into the runtime's folder, a run then reads the token through the link
    in its generated home (redacted from everything stored), and `accounts`, `doctor` and `doc
    config` name it."""
    scratch = short_tmpdir("art-echo-")
    signin_dir = scratch / "signin"
    config = ECHO_CONFIG + (
        f'binary = "{login_binary(scratch)}"\nauth = {{ login = "native", dir = "{signin_dir}" }}\n'
    )
    home = make_home(config)
    site = scratch / "site"
    install_entry_point(site)
    workdir = scratch / "work"
    workdir.mkdir()
    env = {"PYTHONPATH": plugin_path(site)}
    daemon = DaemonProcess(home, env=env).start()  # a native login the config accepts
    try:
        agent = daemon.call("start", {"task": "ping", "workdir": str(workdir)})
        view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
        assert view["execution"]["failure_kind"] == "auth_failed", view
        assert "agent-run login echo" in view["execution"]["failure_message"]
        assert not daemon.call("accounts", {})["accounts"][0]["signed_in"]

        token = "echo-token-5b7e91d2"
        login = cli(home, "login", "echo", "--with-api-key", env=env, input=token + "\n")
        assert login.returncode == 0, login.stderr
        assert json.loads((signin_dir / "echo-auth.json").read_text())["token"] == token

        agent = daemon.call("start", {"task": "ping", "workdir": str(workdir)})
        done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
        assert done["state"] == "succeeded", done
        answer = daemon.call("answer", {"agent_id": agent["id"]})["text"]
        assert answer == "hi there: ping (signed in with [REDACTED])"  # read through the link
        assert files_holding(home.root, token) == []  # the real file is outside the home
        [account] = daemon.call("accounts", {})["accounts"]
        assert (account["signed_in"], account["email"]) == (True, "dev@example.com")
        checks = {c["check"]: c for c in daemon.call("doctor", {})["checks"]}
        assert checks["sign-in echo"]["level"] == "ok", checks
        assert token not in json.dumps(checks)
        topic = cli(home, "doc", "config", env=env).stdout
        assert "|echo)" in topic and "claude, echo:" in topic
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
    assert plan["plan_version"] == 3 and "prompt" not in plan
    assert plan["runtime_config"]["greeting"] == "hi there"  # the engine's own option, typed

    daemon.call("resume", {"agent_id": agent["id"], "prompt": "again"})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "succeeded", done
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "hi there: again"
    rows = db_rows(home, "SELECT plan_json, engine_session_id FROM executions ORDER BY number")
    assert json.loads(rows[1]["plan_json"])["resume_session_id"] == rows[0]["engine_session_id"]


@contextmanager
def registry_restored() -> Iterator[None]:
    """The in-process registry as it was before, once the block ends (else `echo` stays known
    to every later test this xdist worker runs)."""
    saved = dict(registry._loaded)
    try:
        yield
    finally:
        registry._loaded.clear()
        registry._loaded.update(saved)


@pytest.fixture
def scoped_registry() -> Iterator[None]:
    """Register in-process for one test only."""
    assert "echo" not in registry._loaded, "an earlier test left the fake engine registered"
    with registry_restored():
        yield


def test_a_registered_engine_gets_its_own_typed_options_and_refuses_others(
    scoped_registry,
) -> None:
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


def test_the_registry_is_restored_after_a_scoped_registration() -> None:
    with registry_restored():
        register(fake_engine.SPEC)
        assert "echo" in engine_names() and engine_spec("echo") is fake_engine.SPEC
    assert "echo" not in engine_names()
    with pytest.raises(UnknownEngine):
        engine_spec("echo")


def test_init_offers_a_plugin_sign_in_with_its_key_variable(scoped_registry) -> None:
    found = dataclasses.replace(
        fake_engine.SPEC,
        default_binary="echo-engine",
        config_example={"engine": "echo", "models": ["echo-1"], "auth": {"login": "native"}},
    )
    register(found)
    text = render_init_config({"echo-engine": "/opt/echo-engine"})
    assert "# echo: found /opt/echo-engine; uncomment to enable." in text
    assert "`agent-run login echo`" in text
    assert '# API key instead: auth = { env = "ECHO_API_KEY" }' in text


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


SRC = REPO / "src" / "agent_run"
# (file, engine named there): why it is not an if-chain on engines. Everything else an engine
# needs is in its spec (sign-in, key variable, login flag, binary, options).
NAMED_OUTSIDE_ITS_MODULE = {
    ("config/model.py", "demo"): "the built-in default runtime",
    ("cli/admin.py", "demo"): "the `demo` verb: the quick start",
    ("cli/quickstart.py", "demo"): "the quick start runs on the offline engine",
    ("services/docs.py", "demo"): "the `demo` doc topic",
    ("engines/options.py", "codex"): "the codex_appserver capacity source (docs/capacity.md)",
    ("engines/quota.py", "codex"): "Codex's own limitId on the wire (its account-wide limit)",
    ("services/capacity_sources.py", "codex"): "the codex_appserver capacity source",
    ("services/notice_send.py", "codex"): "the Codex notice transport",
    ("supervisor/zygote.py", "demo"): "the fork server's preload list (supervisor/zygote.py)",
    ("supervisor/zygote.py", "claude"): "the fork server's preload list",
    ("supervisor/zygote.py", "codex"): "the fork server's preload list",
    ("supervisor/zygote.py", "qwen"): "the fork server's preload list",
}


def engines_named(path: Path) -> set[str]:
    """Built-in engines a module names in a string: `"codex"`, or an engine module
    (`"agent_run.engines.claude"` names `claude`)."""
    modules = {target.split(":")[0] for target in BUILTIN_ENGINES.values()}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            module = node.value.split(":")[0]
            if node.value in BUILTIN_ENGINES:
                found.add(node.value)
            elif module in modules:
                found.add(module.rpartition(".")[2])
    return found


def test_no_module_but_an_engines_own_names_a_builtin_engine() -> None:
    own: dict[str, set[str]] = {}  # an engine module's file -> the engines it defines
    for name, target in BUILTIN_ENGINES.items():
        module = target.split(":")[0]
        own.setdefault(module.removeprefix("agent_run.").replace(".", "/") + ".py", set()).update(
            {name, module.rpartition(".")[2]}
        )
    stray = sorted(
        f"{rel} names {name!r}"
        for path in SRC.rglob("*.py")
        if (rel := path.relative_to(SRC).as_posix()) != "engines/registry.py"
        for name in engines_named(path)
        if name not in own.get(rel, set()) and (rel, name) not in NAMED_OUTSIDE_ITS_MODULE
    )
    assert stray == []
    still_needed = {
        (rel, n) for rel, _ in NAMED_OUTSIDE_ITS_MODULE for n in engines_named(SRC / rel)
    }
    assert set(NAMED_OUTSIDE_ITS_MODULE) <= still_needed


def test_lone_surrogates_in_an_engines_output_become_replacement_characters(plugin_daemon):
    """A provider's text with a lone UTF-16 surrogate escaped in its JSON (which an engine
    passes on as it is) cannot be encoded as UTF-8 for SQLite or answer.md: the supervisor
    makes each one U+FFFD, and the run ends with its answer and its messages."""
    home, daemon, workdir = plugin_daemon
    lines = [
        '{"t": "session", "id": "sess-\\udfff"}',
        '{"t": "say", "text": "half \\ud800 a pair \\ud83d\\ude00 low \\udc00"}',
        '{"t": "done", "text": "answer \\ud800\\ud800 end"}',
    ]
    agent = daemon.call("start", {"task": "raw:" + "\n".join(lines), "workdir": str(workdir)})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "succeeded", done
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "answer \ufffd\ufffd end"
    said = [m["content"] for m in db_rows(home, "SELECT content FROM messages")]
    assert said == ["half \ufffd a pair \U0001f600 low \ufffd"]
    [row] = db_rows(home, "SELECT engine_session_id FROM executions")
    assert row["engine_session_id"] == "sess-\ufffd"
    transcript = daemon.call("transcript", {"agent_id": agent["id"]})
    assert "half \ufffd a pair" in json.dumps(transcript, ensure_ascii=False)
