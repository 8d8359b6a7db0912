"""The `agent-run` command line as a user runs it: real processes against a real daemon."""

import json
import os
import plistlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from agent_run.cli.main import cli as root_command
from agent_run.cli.main import command_for
from agent_run.domain.failures import FailureKind
from agent_run.system.home import Home
from agent_run.tools.table import TOOLS
from tests.harness import (
    DaemonProcess,
    cli,
    cli_json,
    kill_leftovers,
    make_home,
    remove_home,
    short_tmpdir,
    wait_for,
)

# Every test using it cancels it: it must outlive the CLI calls made meanwhile, each a fresh
# interpreter that can take seconds on a loaded machine (5 s of steps lost that race under load).
SLOW_TASK = "steps: 600\nstep_seconds: 0.1\nanswer: x"
ADMIN_VERBS = {
    "init",
    "doctor",
    "login",
    "api",
    "demo",
    "mcp",
    "web",
}  # login: interactive, in your terminal
NO_AUTOSTART = {"AGENT_RUN_NO_AUTOSTART": "1"}


# -- autostarted daemons: found by the home's lock, stopped by pid ----------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _is_daemon_of(pid: int, home: Home) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    return str(home.root).encode() in argv and b"serve" in argv


def lock_pid(home: Home) -> int | None:
    try:
        text = home.lock_path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


def stop_autostarted_daemon(home: Home) -> None:
    pid = lock_pid(home)
    if pid is not None and _alive(pid) and _is_daemon_of(pid, home):
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not _alive(pid), timeout=30, what=f"autostarted daemon {pid} to stop")
    kill_leftovers(home)


@pytest.fixture
def bare_home() -> Iterator[Home]:
    """A configured home with no daemon: whatever a test autostarts is stopped afterwards."""
    home = make_home()
    yield home
    stop_autostarted_daemon(home)
    remove_home(home)


@pytest.fixture
def fresh_home() -> Iterator[Home]:
    """A home path that does not exist yet (no config, no folders)."""
    home = Home(short_tmpdir() / "h")
    yield home
    stop_autostarted_daemon(home)
    remove_home(home)


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """Every line of stdout, each required to be exactly one JSON object."""
    lines = stdout.splitlines()
    assert lines, "no output"
    objects = []
    for line in lines:
        obj = json.loads(line)
        assert isinstance(obj, dict), line
        objects.append(obj)
    return objects


def start_agent(home: Home, workdir: Path, task: str) -> str:
    return cli_json(home, "start", "--task", task, "--workdir", str(workdir))["id"]


# -- autostart --------------------------------------------------------------------------------


def test_a_verb_autostarts_a_daemon_and_says_so_on_stderr_only_once(bare_home: Home) -> None:
    assert not bare_home.socket_path.exists()
    first = cli(bare_home, "agents")
    assert first.returncode == 0, first.stderr
    assert json_lines(first.stdout)[0]["total"] == 0
    said = re.search(r"started one \(pid (\d+)\)", first.stderr)
    assert said, first.stderr
    pid = int(said.group(1))
    assert lock_pid(bare_home) == pid
    assert _alive(pid) and _is_daemon_of(pid, bare_home)

    second = cli(bare_home, "agents")
    assert second.returncode == 0, second.stderr
    assert "started" not in second.stderr
    assert "no daemon" not in second.stderr
    assert lock_pid(bare_home) == pid, "the second call must reuse the running daemon"


def test_with_autostart_off_and_no_daemon_a_verb_fails_with_daemon_unavailable(
    bare_home: Home,
) -> None:
    result = cli(bare_home, "agents", env=NO_AUTOSTART)
    assert result.returncode == 1
    error = json_lines(result.stdout)[-1]["error"]
    assert error["code"] == "DaemonUnavailable"
    assert "AGENT_RUN_NO_AUTOSTART" in error["message"]
    assert "started" not in result.stderr
    assert not bare_home.socket_path.exists()
    assert lock_pid(bare_home) is None


def test_with_autostart_off_a_running_daemon_is_still_used(
    daemon: DaemonProcess, home: Home
) -> None:
    result = cli(home, "agents", env=NO_AUTOSTART)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json_lines(result.stdout)[0]["total"] == 0


def test_autostart_under_an_invalid_config_fails_fast_naming_the_field() -> None:
    home = make_home('schema_version = 1\ncolour = "red"\n')
    try:
        began = time.monotonic()
        result = cli(home, "agents", timeout=30)
        assert result.returncode == 1
        error = json_lines(result.stdout)[-1]["error"]
        assert "`colour`" in error["message"]
        # It gives up when the daemon it started exits, not after the 20 s autostart bound.
        assert time.monotonic() - began < 12
    finally:
        stop_autostarted_daemon(home)
        remove_home(home)


# -- the quick start --------------------------------------------------------------------------


def test_demo_in_a_fresh_home_verifies_every_answer_and_shows_where_to_look(
    fresh_home: Home,
) -> None:
    result = cli(fresh_home, "demo", timeout=120)
    repo = re.search(r"^demo repository: (.+)$", result.stdout, re.M)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "started one" in result.stderr  # a fresh machine has no daemon yet
        # the demo repository and its worktrees live in the home, not in an unexplained /tmp dir
        assert Path(repo.group(1)).is_relative_to(fresh_home.root / "demos")
        worktrees = [p for p in Path(repo.group(1)).parent.iterdir() if p.name != "demo-project"]
        assert len(worktrees) == 3, worktrees  # one per candidate
        proofs = re.findall(
            r"^\s+sha256 ([0-9a-f]{64}) \((\d+) bytes, (\w+)\)$", result.stdout, re.M
        )
        assert len(proofs) == 3, result.stdout  # one per candidate
        assert all(mark == "verified" for _sha, _n, mark in proofs)
        ranking = re.findall(r"^\s+#(\d)\s+candidate \d\s+score\s+[\d.]+", result.stdout, re.M)
        assert ranking == ["1", "2", "3"], result.stdout
        assert "look further:" in result.stdout
        # piped, the live view is one line per change, never the whole batch again
        assert result.stdout.count("\n  project ") == 1, result.stdout
        batch_id = re.search(r"batch show (bt_[0-9a-z]+) --format text", result.stdout).group(1)
        first = re.search(r"answer (ag_[0-9a-z]+) --format text", result.stdout)
        assert first, result.stdout
        for verb in (
            f"batch show {batch_id}",
            f"batch review {batch_id}",
            f"answer {first.group(1)}",
            f"transcript {first.group(1)}",
        ):
            assert f"agent-run --home {fresh_home.root} {verb}" in result.stdout
        assert f"agent-run --home {fresh_home.root} web --open" in result.stdout
        assert f"http://127.0.0.1:8787/batches/{batch_id}" in result.stdout
        # The printed proof is the daemon's: `answer` of the winner reports the same sha256.
        answer = cli_json(fresh_home, "answer", first.group(1))
        assert answer["sha256"] == proofs[0][0]
        assert answer["bytes"] == int(proofs[0][1])
        batch = cli_json(fresh_home, "batch", "show", batch_id)
        assert batch["state"] == "completed" and batch["workflow"] == "ranked"
    finally:
        if repo:
            shutil.rmtree(Path(repo.group(1)).parent, ignore_errors=True)


# -- exit codes of start --wait and wait ------------------------------------------------------


def test_start_wait_exits_0_when_the_agent_succeeds(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    result = cli(home, "start", "--task", "answer: hi", "--workdir", str(workdir), "--wait")
    assert result.returncode == 0, result.stdout + result.stderr
    [waited] = json_lines(result.stdout)  # one object, shaped as `wait` prints it
    assert set(waited) == {"agent", "timed_out"} and waited["timed_out"] is False
    started = re.search(r"^agent-run: started (ag_[0-9a-z]+); waiting", result.stderr, re.M)
    assert started and waited["agent"]["id"] == started.group(1), result.stderr
    assert waited["agent"]["state"] == "succeeded"
    assert cli_json(home, "answer", started.group(1))["text"] == "hi"


def test_start_wait_exits_2_when_the_agent_fails(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    result = cli(home, "start", "--task", "fail: auth", "--workdir", str(workdir), "--wait")
    assert result.returncode == 2, result.stdout + result.stderr
    waited = json_lines(result.stdout)[-1]
    assert waited["agent"]["state"] == "failed"
    assert waited["agent"]["failure_kind"] == "auth_failed"


def test_wait_exits_3_when_the_agent_is_cancelled_meanwhile(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    agent_id = start_agent(home, workdir, SLOW_TASK)
    env = {k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"}
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_run",
            "--home",
            str(home.root),
            "wait",
            agent_id,
            "--timeout",
            "30",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        cancelled = cli_json(home, "cancel", agent_id)
        assert cancelled["accepted"] is True
        out, err = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert waiter.returncode == 3, out + err
    assert json_lines(out)[-1]["agent"]["state"] == "cancelled"


def test_start_wait_exits_3_when_the_agent_is_cancelled_meanwhile(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"}
    starter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_run",
            "--home",
            str(home.root),
            "start",
            "--task",
            SLOW_TASK,
            "--workdir",
            str(workdir),
            "--wait",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert starter.stderr is not None
        said = starter.stderr.readline()  # the id, said at once on stderr, before it waits
        agent_id = re.search(r"started (ag_[0-9a-z]+)", said).group(1)
        assert cli_json(home, "cancel", agent_id)["accepted"] is True
        rest, err = starter.communicate(timeout=30)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
    assert starter.returncode == 3, rest + err
    assert json_lines(rest)[-1]["agent"]["state"] == "cancelled"


def test_wait_with_a_short_timeout_on_a_slow_agent_exits_4_with_timed_out(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    agent_id = start_agent(home, workdir, SLOW_TASK)
    began = time.monotonic()
    result = cli(home, "wait", agent_id, "--timeout", "0.2")
    assert result.returncode == 4, result.stdout + result.stderr
    waited = json_lines(result.stdout)[-1]
    assert waited["timed_out"] is True
    assert waited["agent"]["state"] in ("created", "starting", "running")
    assert time.monotonic() - began < 15
    cli_json(home, "cancel", agent_id)


def test_an_error_exits_1_with_one_json_error_line(daemon: DaemonProcess, home: Home) -> None:
    result = cli(home, "agent", "ag_zzzz")
    assert result.returncode == 1
    (line,) = json_lines(result.stdout)
    assert line["error"]["code"] == "AgentNotFound"
    assert line["error"]["field"] == "agent_id"


def test_an_error_in_text_format_goes_to_stderr_with_code_and_field(
    daemon: DaemonProcess, home: Home
) -> None:
    result = cli(home, "agent", "ag_zzzz", "--format", "text")
    assert result.returncode == 1
    assert result.stdout == ""
    assert "AgentNotFound [agent_id]" in result.stderr


def test_bad_params_from_the_cli_are_invalid_params_naming_the_field(
    daemon: DaemonProcess, home: Home
) -> None:
    result = cli(home, "agent", "nope")
    assert result.returncode == 1
    error = json_lines(result.stdout)[-1]["error"]
    assert error["code"] == "InvalidParams"
    assert error["field"] == "agent_id"


# -- output format ----------------------------------------------------------------------------


def test_every_verb_prints_one_json_object_per_line(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    started = cli(
        home,
        "start",
        "--task",
        "steps: 2\nstep_seconds: 0.05\nanswer: hi",
        "--workdir",
        str(workdir),
        "--wait",
    )
    assert started.returncode == 0, started.stderr
    agent_id = json_lines(started.stdout)[0]["agent"]["id"]
    runs = {
        "start": started,
        "agents": cli(home, "agents"),
        "agent": cli(home, "agent", agent_id),
        "answer": cli(home, "answer", agent_id),
        "transcript": cli(home, "transcript", agent_id),
        "transcript --follow": cli(home, "transcript", agent_id, "--follow"),
        "wait": cli(home, "wait", agent_id),
        "cancel": cli(home, "cancel", agent_id),
        "steer": cli(home, "steer", agent_id, "--text", "more please"),
        "doc": cli(home, "doc"),
        "doctor": cli(home, "doctor"),
        "init": cli(home, "init"),
    }
    # A verb added to the table later is covered too: called with the agent and a value per
    # required option, it must answer (result or error) in the same one-object-per-line form.
    for tool in TOOLS.values():
        if tool.cli_verb in {name.split()[0] for name in runs}:
            continue
        args = tool.cli_verb.split()
        for name, field in tool.params.model_fields.items():
            if name == "agent_id":
                args += [agent_id] if name in tool.positional else ["--agent-id", agent_id]
            elif field.is_required():
                args += ["x"] if name in tool.positional else [f"--{name.replace('_', '-')}", "x"]
        runs[" ".join(args)] = cli(home, *args)
    for name, result in runs.items():
        objects = json_lines(result.stdout)
        assert objects, name
    assert len(json_lines(runs["transcript --follow"].stdout)) >= 3  # user, progress, answer
    assert json_lines(runs["cancel"].stdout)[0]["accepted"] is False
    assert json_lines(runs["steer"].stdout)[0]["error"]["code"] == "NotRunning"
    assert json_lines(runs["init"].stdout)[0]["error"]["code"] == "ConfigInvalid"
    one_line = (
        "start",
        "agents",
        "agent",
        "answer",
        "transcript",
        "wait",
        "cancel",
        "doc",
        "doctor",
    )
    for name in one_line:
        assert len(runs[name].stdout.splitlines()) == 1, (name, runs[name].stdout)


def test_format_text_works_before_and_after_the_verb(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    result = cli(
        home, "start", "--task", "answer: hello there", "--workdir", str(workdir), "--wait"
    )
    agent_id = json_lines(result.stdout)[0]["agent"]["id"]
    before = cli(home, "--format", "text", "agents")
    after = cli(home, "agents", "--format", "text")
    assert before.returncode == after.returncode == 0
    ago = re.compile(r"\d+[smh] ago")  # the age column may tick between the two calls
    assert ago.sub("_", before.stdout) == ago.sub("_", after.stdout)
    assert "1 of 1 agents" in after.stdout
    assert agent_id in after.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(after.stdout.splitlines()[0])
    answer = cli(home, "answer", agent_id, "--format", "text")
    assert answer.stdout.startswith("hello there\n-- verified:")
    agent = cli(home, "--format", "text", "agent", agent_id)
    assert agent.stdout.startswith(f"{agent_id}  succeeded")
    doctor = cli(home, "doctor", "--format", "text")
    assert re.search(r"^ok\s+daemon\s", doctor.stdout, re.M), doctor.stdout


# -- doctor, service files, doc ---------------------------------------------------------------


def test_doctor_reports_ok_for_home_config_daemon_runtime_and_supervisor_spawn(
    daemon: DaemonProcess, home: Home
) -> None:
    result = cli(home, "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json_lines(result.stdout)[0]
    assert report["ok"] is True
    checks = {c["check"]: c for c in report["checks"]}
    for name in ("home", "config", "daemon", "runtime demo", "supervisor spawn"):
        assert checks[name]["ok"] is True, checks.get(name)
    assert str(daemon.proc.pid) in checks["daemon"]["detail"]


def test_doctor_flags_a_home_that_is_too_open(bare_home: Home) -> None:
    bare_home.root.chmod(0o755)
    result = cli(bare_home, "doctor")
    assert result.returncode == 1
    checks = {c["check"]: c for c in json_lines(result.stdout)[0]["checks"]}
    assert checks["home"]["ok"] is False
    assert "755" in checks["home"]["detail"]


def test_doctor_flags_a_runtime_whose_binary_is_missing() -> None:
    home = make_home(
        'schema_version = 1\n[runtimes.demo]\nengine = "demo"\n'
        '[runtimes.codex]\nengine = "codex"\nbinary = "/nonexistent/codex-xyz"\n'
    )
    try:
        result = cli(home, "doctor")
        assert result.returncode == 1
        checks = {c["check"]: c for c in json_lines(result.stdout)[0]["checks"]}
        assert checks["runtime demo"]["ok"] is True
        assert checks["runtime codex"]["ok"] is False
        assert "not found" in checks["runtime codex"]["detail"]
    finally:
        remove_home(home)


def _expected_argv(home: Home) -> list[str]:
    return [sys.executable, "-m", "agent_run", "--home", str(home.root), "api", "serve"]


def test_api_systemd_prints_a_unit_running_this_interpreter_on_this_home(home: Home) -> None:
    result = cli(home, "api", "systemd")
    assert result.returncode == 0, result.stderr
    exec_start = re.search(r"^ExecStart=(.+)$", result.stdout, re.M)
    assert exec_start, result.stdout
    assert sys.executable in exec_start.group(1)
    assert f"--home {home.root}" in exec_start.group(1)
    assert "api serve" in exec_start.group(1)
    assert shlex.split(exec_start.group(1)) == _expected_argv(home)
    assert "[Service]" in result.stdout and "[Install]" in result.stdout
    assert not home.socket_path.exists(), "printing a unit must not start a daemon"


def test_api_launchd_prints_a_plist_that_parses_and_runs_this_interpreter_on_this_home(
    home: Home,
) -> None:
    result = cli(home, "api", "launchd")
    assert result.returncode == 0, result.stderr
    assert sys.executable in result.stdout
    assert f"<string>{home.root}</string>" in result.stdout
    plist = plistlib.loads(result.stdout.encode())
    assert plist["ProgramArguments"] == _expected_argv(home)
    assert plist["KeepAlive"] == {"SuccessfulExit": False} and plist["RunAtLoad"] is True


def test_api_launchd_plist_escapes_a_home_with_xml_characters() -> None:
    home = Home(short_tmpdir() / "a&b<c>")
    try:
        result = cli(home, "api", "launchd")
        assert result.returncode == 0, result.stderr
        assert plistlib.loads(result.stdout.encode())["ProgramArguments"] == _expected_argv(home)
    finally:
        shutil.rmtree(home.root.parent, ignore_errors=True)


def test_api_systemd_quotes_a_home_with_a_space() -> None:
    home = Home(short_tmpdir() / "my home")
    try:
        result = cli(home, "api", "systemd")
        assert result.returncode == 0, result.stderr
        exec_start = re.search(r"^ExecStart=(.+)$", result.stdout, re.M)
        assert exec_start is not None
        assert shlex.split(exec_start.group(1)) == _expected_argv(home)
    finally:
        shutil.rmtree(home.root.parent, ignore_errors=True)


def test_doc_without_a_topic_lists_the_topics(daemon: DaemonProcess, home: Home) -> None:
    result = cli_json(home, "doc")
    assert result["topic"] == "overview"
    assert {"overview", "states", "failures", "demo", "config"} <= set(result["topics"])
    for topic in result["topics"]:
        assert topic in result["text"]


def test_doc_failures_lists_every_failure_kind(daemon: DaemonProcess, home: Home) -> None:
    result = cli_json(home, "doc", "failures")
    assert result["topic"] == "failures"
    for kind in FailureKind:
        assert re.search(rf"^\s+{kind.value}\s+\S", result["text"], re.M), kind.value
        assert kind.advice in result["text"]


def test_doc_of_an_unknown_topic_exits_1_with_invalid_request_naming_topic(
    daemon: DaemonProcess, home: Home
) -> None:
    result = cli(home, "doc", "nope")
    assert result.returncode == 1
    error = json_lines(result.stdout)[-1]["error"]
    assert error["code"] == "InvalidRequest"
    assert error["field"] == "topic"
    assert "failures" in error["message"]  # it says which topics exist


# -- one tool table, one CLI ------------------------------------------------------------------


def _param_names(command: click.Command) -> set[str]:
    return {p.name for p in command.params if p.name is not None}


@pytest.mark.parametrize("tool_name", sorted(TOOLS))
def test_every_tool_has_a_cli_verb_covering_all_its_params(tool_name: str) -> None:
    tool = TOOLS[tool_name]
    command = command_for(root_command, tool.cli_verb)
    assert command is not None, f"no CLI verb {tool.cli_verb} for tool {tool_name}"
    fields = tool.params.model_fields
    assert set(fields) <= _param_names(command), set(fields) - _param_names(command)
    by_name = {p.name: p for p in command.params}
    for name, field in fields.items():
        param = by_name[name]
        assert param.required == field.is_required(), name
        if name in tool.positional:
            assert isinstance(param, click.Argument), name
        else:
            assert isinstance(param, click.Option), name
            assert f"--{name.replace('_', '-')}" in param.opts, (name, param.opts)
    assert "format" in _param_names(command) or any(
        "--format" in p.opts for p in command.params if isinstance(p, click.Option)
    )


def test_the_cli_grows_no_verbs_of_its_own_beyond_the_tool_table_and_admin() -> None:
    assert (
        set(root_command.commands) == {t.cli_verb.split()[0] for t in TOOLS.values()} | ADMIN_VERBS
    )


def test_the_frozen_cli_spec_matches_the_tool_table() -> None:
    """`cli_spec.json` is what the CLI builds its verbs from: regenerate it with
    `python -m agent_run.cli.spec` whenever a tool's params or doc change."""
    from agent_run.cli import spec as cli_spec

    assert cli_spec.load() == cli_spec.build()


@pytest.mark.parametrize("argv", [["--version"], ["agents"], ["agents", "--format", "text"]])
def test_a_plain_verb_imports_no_pydantic_mcp_server_stack_or_engines(daemon, home, argv) -> None:
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['agent-run', '--home', {str(home.root)!r}, *{argv!r}]\n"
        "try:\n    runpy.run_module('agent_run', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "heavy = {'pydantic', 'mcp', 'mcp_types', 'starlette', 'uvicorn', 'anyio', 'structlog', 'asyncio'}\n"
        "loaded = sorted(m for m in sys.modules\n"
        "                if m.split('.')[0] in heavy or m.startswith('agent_run.engines'))\n"
        "print('LOADED', loaded, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENT_RUN_NO_AUTOSTART": "1"},
    )
    assert "LOADED []" in result.stderr, result.stderr
    assert result.stdout.strip(), "the verb really ran"
    if argv == ["agents"]:
        assert json.loads(result.stdout)["items"] == []


def test_transcript_follow_in_text_prints_each_turns_prompt_once_before_its_messages(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    agent = daemon.call(
        "start", {"task": "steps: 2\nstep_seconds: 0\nanswer: one", "workdir": str(workdir)}
    )
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    daemon.call("resume", {"agent_id": agent["id"], "prompt": "answer: two"})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    text = cli(home, "transcript", agent["id"], "--follow", "--limit", "1", "--format", "text")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines.count("── turn 1 · start ──") == 1 and lines.count("── turn 2 · resume ──") == 1
    first, second = lines.index("── turn 1 · start ──"), lines.index("── turn 2 · resume ──")
    assert first == 0 and lines[second + 1] == "> answer: two"
    assert lines[second - 1] == "assistant: one" and lines[-1] == "assistant: two"
    plain = cli(home, "transcript", agent["id"], "--follow")  # JSON lines: items only, as before
    assert all("role" in o for o in json_lines(plain.stdout))
