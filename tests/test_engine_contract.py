"""The engine contract: every real engine CLI (Claude Code, GLM through it, Codex, Qwen Code)
under agent-run, against the mock provider, in the same scenarios.

Text answer, shell tool, file write, the worker tools' `finish`, resume, steer, cancel, the
provider faults the engines share, a refused connection, a missing binary, the key kept out of
argv and files, a hostile key the model's shell and every process it starts never see, and
quota headers. What differs between engines is data in
tests/engine_cases.py; what only one engine does is in its own file (test_engine_claude.py,
test_engine_codex.py, test_engine_qwen.py).
"""

import json
import os
import time
from pathlib import Path

import pytest

from agent_run.supervisor.redact import secret_forms
from tests.engine_cases import CASES, FAULTS, EngineCase, events
from tests.engine_harness import (
    PLANTED_KEY,
    HeldReply,
    engine_argv_while_held,
    engine_daemon,
    engine_group_gone,
    files_containing,
    free_port,
    run_agent,
    runtime_block,
    wait_done,
)
from tests.harness import db_rows, wait_for
from tests.support.mock_provider import MockProvider, Text, ToolCall

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

FINISH = ToolCall(
    "mcp__agent_run_worker__finish", {"summary": "Refactored the parser.", "status": "done"}
)


@pytest.fixture(params=CASES, ids=str)
def case(request) -> EngineCase:
    return request.param


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


# The watchdog's bound where a stall is not the scenario: generous, since on a loaded machine
# (2 cores, many suites) an engine's start alone has kept it silent for over 20 s.
STALL_SECONDS = 60.0


def block(case: EngineCase, url: str, **knobs) -> str:
    knobs = {"stall_seconds": STALL_SECONDS, **knobs}
    return runtime_block("r", case.name, url + case.url_suffix, case.model, **knobs)


@pytest.fixture
def rig(case, provider):
    """(home, daemon) with runtime `r` = this engine pointed at the mock provider."""
    with engine_daemon(block(case, provider.url)) as pair:
        yield pair


def start(daemon, workdir, task: str) -> str:
    return daemon.call("start", {"task": task, "workdir": str(workdir), "runtime": "r"})["id"]


def test_text_answer_with_the_key_sent_only_as_its_auth_header(case, provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("The answer is 42."))
    view = run_agent(daemon, "r", "What is six times seven?", workdir)
    assert view["state"] == "succeeded", str(view["execution"])
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "The answer is 42."
    request = provider.main_requests()[0]
    assert case.key_of(request) == PLANTED_KEY
    assert [k for k, v in request.headers.items() if PLANTED_KEY in v] == [case.key_header]
    assert PLANTED_KEY not in json.dumps(request.body)
    assert request.body["model"] == case.model
    assert "six times seven" in request.text()
    assert view["execution"]["usage"]["output_tokens"] == 5, "this turn's usage, counted once"
    assert view["execution"]["engine_session_id"], "the session id is kept for resume"
    assert provider.auxiliary_requests() == [], "no side traffic to the provider"
    assert engine_group_gone(home, view["id"])
    assert list(home.root.rglob(case.token_file)) == [], "the worker token's file is removed"
    case.check_text(home, view)


def test_shell_tool_call_runs_and_its_output_reaches_the_model(case, provider, rig, workdir):
    home, daemon = rig
    provider.add(case.shell("echo tool-ran-$((40+2))"), Text("The command printed 42."))
    view = run_agent(daemon, "r", "Run the marker command.", workdir)
    assert view["state"] == "succeeded", str(view["execution"])
    assert "tool-ran-42" in provider.main_requests()[1].tool_results()[0].output
    items = daemon.call("transcript", {"agent_id": view["id"]})["items"]
    assert any(i["role"] == "tool_call" and i["name"] == case.shell_tool for i in items)
    assert any(i["role"] == "tool" and "tool-ran-42" in i["content"] for i in items)
    assert view["execution"]["usage"]["output_tokens"] == 10, "5 per model response, once each"


def test_file_written_in_the_workdir(case, provider, rig, workdir):
    home, daemon = rig
    provider.add(case.write_file(workdir / "hello.txt", "hi there\n"), Text("Wrote hello.txt."))
    view = run_agent(daemon, "r", "Write hello.txt.", workdir)
    assert view["state"] == "succeeded", str(view["execution"])
    assert (workdir / "hello.txt").read_text() == "hi there\n"


def test_finish_through_the_worker_tools_sets_answer_and_verdict(case, provider, rig, workdir):
    home, daemon = rig
    provider.add(FINISH, Text("Done."))
    view = run_agent(daemon, "r", "Refactor, then call finish.", workdir)
    assert view["state"] == "succeeded", str(view["execution"])
    assert view["verdict"] == "done"
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "Refactored the parser."
    assert "recorded" in provider.main_requests()[1].tool_results()[0].output
    # The worker server got the capability token, not the provider key (Qwen Code hands its
    # whole environment to MCP servers: the key must not have been stored by ours).
    assert files_containing(home.root, PLANTED_KEY) == []


def test_resume_continues_the_session_with_its_history(case, provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("Remember: the code word is PLUM."))
    first = run_agent(daemon, "r", "Pick a code word.", workdir)
    assert first["state"] == "succeeded", str(first["execution"])
    provider.add(Text("The code word was PLUM."))
    daemon.call("resume", {"agent_id": first["id"], "prompt": "What was the code word?"})
    view = wait_done(daemon, first["id"])
    assert view["state"] == "succeeded" and view["execution"]["number"] == 2, view
    assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "The code word was PLUM."
    assert view["execution"]["engine_session_id"] == first["execution"]["engine_session_id"]
    assert view["execution"]["usage"]["output_tokens"] == 5, "a resume does not re-count turn one"
    second_request = provider.main_requests()[-1]
    assert "Pick a code word" in second_request.text(), "resume must send the earlier turns"
    assert "code word is PLUM" in second_request.text()
    assert "What was the code word?" in second_request.text()
    assert engine_group_gone(home, first["id"])


def test_steer_reaches_the_model_and_its_answer_is_kept(case, provider, rig, workdir):
    """A steer sent while the model streams: queued as the next turn (Claude Code, Qwen Code)
    or joined to the running one (Codex `turn/steer`); either way the model sees it after
    the first answer, and the steered answer is the agent's."""
    home, daemon = rig
    provider.add(Text("Working on the first request...", seconds=4), Text("Steered answer."))
    agent_id = start(daemon, workdir, "First request.")
    assert provider.wait_for(lambda reqs: any(r.role == "main" for r in reqs), timeout=120)
    steer = daemon.call("steer", {"agent_id": agent_id, "text": "Also do the second thing."})
    assert steer["state"] == "delivered", steer
    view = wait_done(daemon, agent_id)
    assert view["state"] == "succeeded", str(view["execution"])
    assert daemon.call("answer", {"agent_id": agent_id})["text"] == "Steered answer."
    last = provider.main_requests()[-1]
    assert "second thing" in last.text()
    assert ("Working on the first request" in last.text()) is case.steer_keeps_first_answer
    assert engine_group_gone(home, agent_id)


def test_cancel_mid_turn_interrupts_and_leaves_no_process(case, provider, rig, workdir):
    home, daemon = rig
    provider.add(Text("A very long answer " * 50, seconds=60))
    agent_id = start(daemon, workdir, "Write a long answer.")
    assert provider.wait_for(lambda reqs: any(r.role == "main" for r in reqs), timeout=60)
    started = time.monotonic()
    daemon.call("cancel", {"agent_id": agent_id})
    view = wait_done(daemon, agent_id, timeout=60)
    assert view["state"] == "cancelled", view
    assert time.monotonic() - started < 15, "the interrupt ends the turn without waiting it out"
    assert engine_group_gone(home, agent_id)
    case.check_cancel(home, view)


FAULT_CASES = [(case, fault_id) for case in CASES for fault_id in case.faults]


@pytest.mark.parametrize(
    ("case", "fault_id"), FAULT_CASES, ids=[f"{c}-{f}" for c, f in FAULT_CASES]
)
def test_provider_fault_ends_failed_with_its_kind_and_no_process_left(
    case, fault_id, provider, workdir
):
    expected = case.faults[fault_id]
    provider.add(FAULTS[fault_id])
    with engine_daemon(block(case, provider.url, **expected.knobs)) as (home, daemon):
        started = time.monotonic()
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=180)
        took = time.monotonic() - started
        assert (view["state"], view["failure_kind"]) == ("failed", expected.kind), view["execution"]
        assert view["execution"]["answer_sha256"] is None
        assert engine_group_gone(home, view["id"])
        assert files_containing(home.root, PLANTED_KEY) == []
        if case.fault_bound_seconds is not None:
            assert took < case.fault_bound_seconds, f"{case} ends this fault by itself"


REFUSING = [case for case in CASES if case.refused_knobs is not None]


@pytest.mark.parametrize("case", REFUSING, ids=str)
def test_refused_connection_is_a_network_error_with_the_brokers_evidence(case, workdir):
    url = f"http://127.0.0.1:{free_port()}"
    with engine_daemon(block(case, url, **(case.refused_knobs or {}))) as (home, daemon):
        started = time.monotonic()
        view = run_agent(daemon, "r", "Say hello.", workdir, timeout=180)
        took = time.monotonic() - started
        assert (view["state"], view["failure_kind"]) == ("failed", "network_error"), view[
            "execution"
        ]
        assert case.refused_says in view["execution"]["failure_message"]
        if case.fault_bound_seconds is not None:
            assert took < case.fault_bound_seconds, f"{case} gives up within its bound"
        assert events(home, view["id"], "upstream_unreachable"), "the broker's evidence is kept"
        assert engine_group_gone(home, view["id"])


def test_missing_binary_is_spawn_failed(case, workdir):
    text = block(case, "http://127.0.0.1:9").replace(
        "node_modules/.bin/", "node_modules/.bin/no-such-"
    )
    with engine_daemon(text) as (home, daemon):
        view = run_agent(daemon, "r", "Say hello.", workdir)
        assert (view["state"], view["failure_kind"]) == ("failed", "spawn_failed"), view


def test_planted_key_appears_nowhere_in_the_home_nor_argv_nor_the_shell(
    case, provider, rig, workdir
):
    home, daemon = rig
    held = HeldReply(case.shell("env"))
    provider.add(held.reply, Text("ok"))
    agent_id = start(daemon, workdir, "Run it.")
    argv = engine_argv_while_held(provider, home, held)  # the leader is read while it waits
    assert argv[0] and case.binary.encode() in b" ".join(argv), argv
    assert len(argv) >= case.group_processes, argv
    assert not any(PLANTED_KEY.encode() in line for line in argv)
    view = wait_done(daemon, agent_id)
    assert view["state"] == "succeeded", str(view["execution"])
    shell_env = provider.main_requests()[-1].tool_results()[-1].output
    assert "PWD=" in shell_env and PLANTED_KEY not in shell_env
    assert files_containing(home.root, PLANTED_KEY) == []
    raw = next(home.agents_dir.rglob("runtime.jsonl")).read_text()
    assert case.first_stdout(json.loads(raw.splitlines()[0])), raw[:300]
    assert engine_group_gone(home, agent_id)


# A key an engine's JSON must escape; no newline, since it travels in an HTTP header.
HOSTILE_KEY = 'sk-live"quote\\back-é-4d1c9e77a0b2'
PROBE = "env; echo; cat $HOME/.*/*.json $HOME/.*/*.toml 2>/dev/null; echo probe-done; sleep 3"


def hostile_forms() -> list[bytes]:
    return [f.encode() for f in secret_forms(HOSTILE_KEY)] + [HOSTILE_KEY.encode("latin-1")]


def hostile_holders(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path}: {f!r}" for f in hostile_forms() if f in data]
    return found


def descendant_environs(root: int) -> dict[int, bytes]:
    """The environment of the engine and every live process descended from it (some engines
    start their shells in new process groups, so the group is not enough)."""
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            parents[int(entry)] = int(
                Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
            )
        except (OSError, IndexError, ValueError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    out = {}
    for pid in tree:
        try:
            out[pid] = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
    return out


def runs_sleep(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep")
    except OSError:
        return False


def test_model_running_env_in_its_shell_never_sees_the_key(case, provider, workdir):
    """The engine gets the supervisor's credential broker and a per-execution token; the key
    stays in the supervisor. The mock provider must still receive the real key (the broker
    swapped it in), and no process the engine starts, no tool output, transcript, answer or
    file under the home, the agent directory or the workdir holds it in any stored form."""
    provider.add(case.shell(PROBE), Text("Looked around."))
    with engine_daemon(block(case, provider.url), key=HOSTILE_KEY) as (home, daemon):
        agent_id = start(daemon, workdir, "Run the probe.")
        pgid = wait_for(lambda: db_rows(home, "SELECT engine_pid FROM executions")[0]["engine_pid"])
        # While the probe's `sleep` runs, every process descended from the engine is checked.
        wait_for(lambda: any(runs_sleep(pid) for pid in descendant_environs(pgid)), timeout=90)
        environs = descendant_environs(pgid)
        assert len(environs) >= 3, "the engine, its shell and the probe"
        assert {pid: f for pid, env in environs.items() for f in hostile_forms() if f in env} == {}
        view = wait_done(daemon, agent_id)
        assert view["state"] == "succeeded", view
        items = daemon.call("transcript", {"agent_id": agent_id})["items"]
        answer = daemon.call("answer", {"agent_id": agent_id})["text"]
        requests = provider.main_requests()
        output = requests[1].tool_results()[0].output
        assert "PATH=" in output and "probe-done" in output, output
        assert all(f.decode("latin-1") not in output for f in hostile_forms())
        assert "é-4d1c9e77a0b2" not in json.dumps(items, ensure_ascii=False) + answer
        assert all(
            case.key_of(r) in (HOSTILE_KEY.encode().decode("latin-1"), HOSTILE_KEY)
            for r in requests
        ), "the broker swapped the real key in"
        assert all("4d1c9e77a0b2" not in json.dumps(r.body) for r in requests)
    assert hostile_holders(home.root) == [] and hostile_holders(workdir) == []


QUOTA = [case for case in CASES if case.quota is not None]


@pytest.mark.parametrize("case", QUOTA, ids=str)
def test_quota_headers_become_windows_shown_by_limits(case, provider, rig, workdir):
    home, daemon = rig
    assert case.quota is not None
    reset = int(time.time()) + 3 * 3600
    provider.response_headers = case.quota.headers(reset)
    provider.add(Text("done"))
    view = run_agent(daemon, "r", "Say done.", workdir)
    assert view["state"] == "succeeded", str(view["execution"])
    samples = db_rows(home, "SELECT window, source, execution_id FROM capacity_samples")
    assert {(r["window"], r["source"], r["execution_id"]) for r in samples} == {
        (window, "native", view["execution"]["id"]) for window in ("5h", "7d")
    }, [dict(r) for r in samples]
    shown = {w["window"]: w for w in daemon.call("limits", {"runtime": "r"})["windows"]}
    assert shown["5h"]["known"] is True and shown["7d"]["known"] is True
    assert shown["7d"]["risk"] in case.quota.risk_7d
    assert {w: shown[w]["remaining_percent"] for w in case.quota.remaining} == pytest.approx(
        case.quota.remaining
    )
    assert shown["5h"]["reset_at"] == reset and shown["7d"]["reset_at"] == reset + 86400
    (route,) = daemon.call("capacity_order", {})["routes"]
    assert route["runtime"] == "r" and route["limiting_window"] == "7d"
