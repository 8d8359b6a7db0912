"""Agent lifecycle through the real daemon, real supervisors and the real demo engine."""

import hashlib
from pathlib import Path

import pytest

from agent_run.domain.errors import (
    AnswerIntegrity,
    AnswerNotReady,
    Conflict,
    DomainError,
    NotRunning,
)
from tests.harness import cli_json, db_rows, pgid_alive, wait_for

SLOW = "steps: 40\nstep_seconds: 0.1\nanswer: slow done"


def start(daemon, workdir, task, **extra):
    return daemon.call("start", {"task": task, "workdir": str(workdir), **extra})


def wait_terminal(daemon, agent_id, timeout=60):
    result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": timeout})
    assert not result["timed_out"], result
    return result["agent"]


def test_start_returns_while_running_and_answer_matches_sealed_file(daemon, home, workdir):
    started = cli_json(home, "start", "--task", SLOW, "--workdir", str(workdir))
    # The CLI process has exited; the agent still runs under its own supervisor.
    assert started["state"] in ("created", "starting", "running")
    assert daemon.call("agent", {"agent_id": started["id"]})["state"] in (
        "created",
        "starting",
        "running",
    )
    view = wait_terminal(daemon, started["id"])
    assert view["state"] == "succeeded"
    answer = daemon.call("answer", {"agent_id": started["id"]})
    assert answer["text"] == "slow done"
    data = Path(answer["path"]).read_bytes()
    assert (
        hashlib.sha256(data).hexdigest() == answer["sha256"] == view["execution"]["answer_sha256"]
    )
    assert len(data) == answer["bytes"]


def test_answer_before_the_agent_succeeds_is_not_ready(daemon, workdir):
    agent = start(daemon, workdir, SLOW)
    with pytest.raises(AnswerNotReady):
        with daemon.client() as c:
            c.call("answer", {"agent_id": agent["id"]})


def test_tampered_answer_fails_with_integrity_error(daemon, workdir):
    agent = start(daemon, workdir, "answer: the truth")
    wait_terminal(daemon, agent["id"])
    path = Path(daemon.call("answer", {"agent_id": agent["id"]})["path"])
    path.write_text("a lie")
    with pytest.raises(AnswerIntegrity) as info:
        with daemon.client() as c:
            c.call("answer", {"agent_id": agent["id"]})
    assert "does not match" in info.value.message


def test_same_request_id_returns_same_agent_and_other_payload_conflicts(daemon, home, workdir):
    first = start(daemon, workdir, "answer: one", request_id="req-1")
    again = start(daemon, workdir, "answer: one", request_id="req-1")
    assert again["id"] == first["id"]
    with pytest.raises(Conflict) as info:
        with daemon.client() as c:
            c.call("start", {"task": "answer: two", "workdir": str(workdir), "request_id": "req-1"})
    assert info.value.field == "request_id"
    assert len(db_rows(home, "SELECT id FROM agents WHERE request_id = 'req-1'")) == 1
    assert len(db_rows(home, "SELECT id FROM executions WHERE agent_id = ?", (first["id"],))) == 1


def test_cancel_running_agent_ends_cancelled_with_engine_group_gone(daemon, home, workdir):
    agent = start(daemon, workdir, "steps: 1000\nstep_seconds: 0.05\nspawn: 300")
    wait_for(
        lambda: db_rows(
            home, "SELECT engine_pid FROM executions WHERE agent_id = ?", (agent["id"],)
        )[0]["engine_pid"],
        what="the engine to start",
    )
    wait_for(
        lambda: daemon.call("agent", {"agent_id": agent["id"]})["event_count"] > 6, what="progress"
    )
    pgid = db_rows(home, "SELECT engine_pid FROM executions WHERE agent_id = ?", (agent["id"],))[0][
        "engine_pid"
    ]
    assert pgid_alive(pgid)
    result = daemon.call("cancel", {"agent_id": agent["id"]})
    assert result["accepted"] is True
    view = wait_terminal(daemon, agent["id"])
    assert view["state"] == "cancelled"
    assert not pgid_alive(pgid), "the engine's process group (and its sleeping child) must be gone"
    again = daemon.call("cancel", {"agent_id": agent["id"]})
    assert again["accepted"] is False and "already cancelled" in again["message"]


def test_cancel_of_finished_agent_says_so_and_changes_nothing(daemon, workdir):
    agent = start(daemon, workdir, "answer: done")
    wait_terminal(daemon, agent["id"])
    result = daemon.call("cancel", {"agent_id": agent["id"]})
    assert result == {
        "agent_id": agent["id"],
        "accepted": False,
        "state": "succeeded",
        "message": "agent already succeeded; nothing to cancel",
    }
    assert daemon.call("agent", {"agent_id": agent["id"]})["state"] == "succeeded"


def test_steer_is_delivered_as_next_turn_and_becomes_the_answer(daemon, workdir):
    agent = start(daemon, workdir, "steps: 30\nstep_seconds: 0.1\nanswer: first turn")
    wait_for(lambda: daemon.call("agent", {"agent_id": agent["id"]})["state"] == "running")
    result = daemon.call("steer", {"agent_id": agent["id"], "text": "answer: steered turn"})
    assert result["state"] == "delivered", result
    view = wait_terminal(daemon, agent["id"])
    assert view["state"] == "succeeded"
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "steered turn"
    roles = [i["role"] for i in daemon.call("transcript", {"agent_id": agent["id"]})["items"]]
    assert "user" in roles


def test_steer_of_a_finished_agent_is_refused_with_not_running(daemon, workdir):
    agent = start(daemon, workdir, "answer: done")
    wait_terminal(daemon, agent["id"])
    with pytest.raises(NotRunning) as info:
        with daemon.client() as c:
            c.call("steer", {"agent_id": agent["id"], "text": "more"})
    assert info.value.field == "agent_id"


@pytest.mark.parametrize(
    ("task", "kind"),
    [
        ("fail: auth", "auth_failed"),
        ("fail: rate_limit", "rate_limited"),
        ("fail: quota", "quota_exhausted"),
        ("fail: server", "provider_error"),
        ("fail: overloaded", "provider_overloaded"),
        ("fail: crash", "engine_crashed"),
        ("fail: malformed", "protocol_error"),
        ("fail: error_reply", "error_reply"),
        ("fail: empty", "no_answer"),
    ],
)
def test_engine_failures_end_failed_with_their_kind(daemon, workdir, task, kind):
    agent = start(daemon, workdir, task)
    view = wait_terminal(daemon, agent["id"])
    assert view["state"] == "failed"
    assert view["failure_kind"] == kind
    assert view["execution"]["failure_advice"]
    assert view["execution"]["answer_sha256"] is None


def test_silent_engine_is_stopped_as_stalled(daemon, home, workdir):
    agent = start(daemon, workdir, "fail: hang", stall_seconds=1)
    view = wait_terminal(daemon, agent["id"])
    assert (view["state"], view["failure_kind"]) == ("failed", "stalled")
    pgid = db_rows(home, "SELECT engine_pid FROM executions WHERE agent_id = ?", (agent["id"],))[0][
        "engine_pid"
    ]
    assert not pgid_alive(pgid)


def test_wall_budget_ends_execution_as_timed_out(daemon, workdir):
    agent = start(daemon, workdir, "steps: 1000\nstep_seconds: 0.05", wall_seconds=1)
    view = wait_terminal(daemon, agent["id"])
    assert (view["state"], view["failure_kind"]) == ("failed", "timed_out")


def test_wait_returns_timed_out_with_current_view(daemon, workdir):
    agent = start(daemon, workdir, SLOW)
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 0.2})
    assert result["timed_out"] is True
    assert result["agent"]["state"] in ("created", "starting", "running")


def test_waits_on_quiet_agents_return_their_ends_while_another_streams(daemon, workdir):
    """A parked `wait` is woken only by its own agent's state changes (not by another agent's
    stream of messages): each still returns its agent's end, and the streaming one's wait
    returns timed out with that agent's current view."""
    chatty = start(daemon, workdir, "steps: 1000\nstep_seconds: 0.02")
    wait_for(
        lambda: daemon.call("agent", {"agent_id": chatty["id"]})["event_count"] >= 5,
        timeout=60,
        what="the chatty agent streaming",
    )
    quiet = [start(daemon, workdir, f"steps: 2\nstep_seconds: 0.5\nanswer: q{i}") for i in range(3)]
    ends = [wait_terminal(daemon, agent["id"]) for agent in quiet]
    assert [(v["state"], v["answer_verified"]) for v in ends] == [("succeeded", True)] * 3
    assert [daemon.call("answer", {"agent_id": a["id"]})["text"] for a in quiet] == [
        "q0",
        "q1",
        "q2",
    ]
    before = daemon.call("agent", {"agent_id": chatty["id"]})["event_count"]
    streaming = daemon.call("wait", {"agent_id": chatty["id"], "timeout_seconds": 1.0})
    assert streaming["timed_out"] is True and streaming["agent"]["state"] == "running"
    # the view is read at the deadline, not kept from when the wait parked
    assert streaming["agent"]["event_count"] > before
    daemon.call("cancel", {"agent_id": chatty["id"]})
    assert wait_terminal(daemon, chatty["id"])["state"] == "cancelled"


def test_transcript_pages_with_a_cursor_until_finished(daemon, workdir):
    agent = start(daemon, workdir, "steps: 7\nstep_seconds: 0\nanswer: end")
    wait_terminal(daemon, agent["id"])
    seen, cursor = [], 0
    while True:
        page = daemon.call("transcript", {"agent_id": agent["id"], "cursor": cursor, "limit": 3})
        seen += [i["content"] for i in page["items"]]
        cursor = page["next_cursor"]
        if page["finished"]:
            break
    assert seen == [f"step {i}/7" for i in range(1, 8)] + ["end"]


def test_transcript_pages_carry_each_turns_prompt_in_the_page_where_it_begins(daemon, workdir):
    task = "steps: 3\nstep_seconds: 0\nanswer: first"
    agent = start(daemon, workdir, task)
    wait_terminal(daemon, agent["id"])
    follow_up = "steps: 2\nstep_seconds: 0\nanswer: second <b>turn</b>"
    daemon.call("resume", {"agent_id": agent["id"], "prompt": follow_up})
    wait_terminal(daemon, agent["id"])
    whole = daemon.call("transcript", {"agent_id": agent["id"], "limit": 1000})
    assert [(t["number"], t["kind"], t["prompt"]) for t in whole["turns"]] == [
        (1, "start", task),
        (2, "resume", follow_up),
    ]
    # Page by page: each turn's prompt comes once, with the page holding the turn's first item.
    seen, cursor = [], 0
    while True:
        page = daemon.call("transcript", {"agent_id": agent["id"], "cursor": cursor, "limit": 2})
        numbers = [i["execution_number"] for i in page["items"]]
        for turn in page["turns"]:
            assert turn["number"] in numbers, (turn, numbers)
            before = [i for i in whole["items"] if i["id"] <= cursor]
            assert all(i["execution_number"] < turn["number"] for i in before)
            seen.append(turn["number"])
        cursor = page["next_cursor"]
        if page["finished"]:
            break
    assert seen == [1, 2]
    assert daemon.call("transcript", {"agent_id": agent["id"], "cursor": cursor})["turns"] == []
    # A turn with no message yet: its prompt is there past the last item, before any item of it.
    daemon.call("resume", {"agent_id": agent["id"], "prompt": "fail: crash"})
    page = daemon.call("transcript", {"agent_id": agent["id"], "cursor": cursor})
    assert [(t["number"], t["prompt"]) for t in page["turns"]] == [(3, "fail: crash")]
    wait_terminal(daemon, agent["id"])


def test_list_agents_filters_and_pages_with_exact_total(daemon, workdir):
    ids = [start(daemon, workdir, f"answer: {n}")["id"] for n in range(5)]
    failed = start(daemon, workdir, "fail: auth")["id"]
    for agent_id in [*ids, failed]:
        wait_terminal(daemon, agent_id)
    page = daemon.call("list_agents", {"limit": 2, "offset": 0})
    assert page["total"] == 6 and len(page["items"]) == 2
    assert page["items"][0]["id"] == failed  # newest first
    rest = daemon.call("list_agents", {"limit": 10, "offset": 2})
    assert {i["id"] for i in page["items"] + rest["items"]} == {*ids, failed}
    only_failed = daemon.call("list_agents", {"state": ["failed"]})
    assert only_failed["total"] == 1 and only_failed["items"][0]["id"] == failed


def test_demo_writes_a_file_in_its_workdir(daemon, workdir):
    agent = start(daemon, workdir, "write: out.txt = hello from the agent\nanswer: wrote it")
    assert wait_terminal(daemon, agent["id"])["state"] == "succeeded"
    assert (workdir / "out.txt").read_text() == "hello from the agent\n"


def test_bad_start_params_name_the_field_and_create_nothing(daemon, home, workdir):
    from agent_run.domain.errors import DomainError

    cases = [
        ({"task": "x", "workdir": "relative/dir"}, "workdir"),
        ({"task": "x", "workdir": str(workdir / "missing")}, "workdir"),
        ({"task": "x", "workdir": str(workdir), "runtime": "nope"}, "runtime"),
        ({"task": "x", "workdir": str(workdir), "model": "gpt-9"}, "model"),
        ({"task": "", "workdir": str(workdir)}, "task"),
        ({"task": "x", "workdir": str(workdir), "profile": "root"}, "profile"),
    ]
    for params, field in cases:
        with pytest.raises(DomainError) as info:
            with daemon.client() as c:
                c.call("start", params)
        assert info.value.field == field, (params, info.value.to_data())
    assert db_rows(home, "SELECT count(*) AS n FROM agents")[0]["n"] == 0


SECRET = "planted-secret-value-7f3a9c"


def test_secret_never_reaches_argv_db_logs_transcript_or_answer(home, workdir):
    from tests.harness import DaemonProcess

    config = (home.root / "config.toml").read_text() + (
        '\n[runtimes.keyed]\nengine = "demo"\nmodels = ["demo-1"]\nauth = { env = "DEMO_TOKEN" }\n'
    )
    (home.root / "config.toml").write_text(config)
    daemon = DaemonProcess(home, env={"DEMO_TOKEN": SECRET}).start()
    try:
        agent = daemon.call(
            "start",
            {
                "task": "steps: 10\nstep_seconds: 0.05\necho_env: DEMO_TOKEN\n"
                "answer: the engine will print its token",
                "workdir": str(workdir),
                "runtime": "keyed",
            },
        )
        engine_pid = wait_for(
            lambda: db_rows(home, "SELECT engine_pid FROM executions")[0]["engine_pid"]
        )
        cmdline = Path(f"/proc/{engine_pid}/cmdline").read_bytes()
        assert SECRET.encode() not in cmdline
        # The engine did receive it, through its environment only.
        assert SECRET.encode() in Path(f"/proc/{engine_pid}/environ").read_bytes()
        view = wait_terminal(daemon, agent["id"])
        assert view["state"] == "succeeded"
        answer = daemon.call("answer", {"agent_id": agent["id"]})["text"]
        assert SECRET not in answer and "[REDACTED]" in answer
    finally:
        daemon.stop()
    leaks = [
        str(p) for p in home.root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()
    ]
    assert leaks == []


def test_engine_that_only_retries_is_stopped_and_its_signals_recorded(home, workdir):
    from tests.harness import DaemonProcess

    config = (
        (home.root / "config.toml")
        .read_text()
        .replace(
            'default_model = "demo-1"', 'default_model = "demo-1"\nretry_give_up_seconds = 1.0'
        )
    )
    (home.root / "config.toml").write_text(config)
    daemon = DaemonProcess(home).start()
    try:
        agent = daemon.call("start", {"task": "fail: retry_forever", "workdir": str(workdir)})
        view = wait_terminal(daemon, agent["id"])
    finally:
        daemon.stop()
    assert (view["state"], view["failure_kind"]) == ("failed", "rate_limited")
    signals = db_rows(
        home,
        "SELECT kind, status, runtime FROM provider_signals WHERE agent_id = ?",
        (agent["id"],),
    )
    assert len(signals) >= 3
    assert {(s["kind"], s["status"], s["runtime"]) for s in signals[:-1]} == {
        ("rate_limited", 429, "demo")
    }


def test_resume_continues_the_engine_session_with_its_history(daemon, home, workdir):
    agent = start(daemon, workdir, "answer: the first answer")
    wait_terminal(daemon, agent["id"])
    resumed = daemon.call("resume", {"agent_id": agent["id"], "prompt": "recall: yes"})
    assert resumed["id"] == agent["id"] and resumed["execution"]["number"] == 2
    view = wait_terminal(daemon, agent["id"])
    assert view["state"] == "succeeded" and view["execution"]["kind"] == "resume"
    assert (
        daemon.call("answer", {"agent_id": agent["id"]})["text"]
        == "Earlier in this session: the first answer"
    )
    sessions = {
        r["engine_session_id"]
        for r in db_rows(
            home, "SELECT engine_session_id FROM executions WHERE agent_id = ?", (agent["id"],)
        )
    }
    assert len(sessions) == 1, "both executions ran in one engine session"


def test_resume_of_a_running_agent_is_a_conflict(daemon, workdir):
    agent = start(daemon, workdir, SLOW)
    with pytest.raises(Conflict):
        with daemon.client() as c:
            c.call("resume", {"agent_id": agent["id"], "prompt": "more"})


def test_list_agents_filters_standalone_agents_and_verdicts(batch_project, workdir):
    daemon = batch_project.daemon
    alone = start(daemon, workdir, "answer: on my own")
    blocked = start(daemon, workdir, "finish: need a key\nfinish_status: blocked\nanswer: stuck")
    batch = batch_project.finish("repeated", runs=2, prompt="answer: in a batch")
    assert batch["state"] == "completed", batch["state_reason"]
    for agent_id in (alone["id"], blocked["id"]):
        wait_terminal(daemon, agent_id)
    run_agents = {r["agent_id"] for r in batch["runs"]}
    mine = daemon.call("list_agents", {"standalone": True})
    assert {a["id"] for a in mine["items"]} == {alone["id"], blocked["id"]} and mine["total"] == 2
    theirs = daemon.call("list_agents", {"standalone": False})
    assert {a["id"] for a in theirs["items"]} == run_agents and theirs["total"] == 2
    says_blocked = daemon.call("list_agents", {"verdict": "blocked"})
    assert [a["id"] for a in says_blocked["items"]] == [blocked["id"]]
    both = daemon.call("list_agents", {"verdict": "blocked", "standalone": False})
    assert both["items"] == [] and both["total"] == 0
    with pytest.raises(DomainError) as bad:
        daemon.call("list_agents", {"verdict": "stuck"})
    assert bad.value.code == "InvalidParams" and bad.value.field == "verdict"
