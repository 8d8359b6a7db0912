"""Completion notices (`notify` on start, the durable outbox, `delivery_status`): the command
transport's success, non-zero exit, timeout and missing binary, each with its evidence; kill -9
of the daemon with notices owed and one mid-send; what a notice may contain."""

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from agent_run.domain.errors import DomainError
from agent_run.domain.notices import NOTICE_MAX_BYTES, backoff_seconds, build_notice
from tests.harness import DaemonProcess, db_rows, wait_for

TASK_MARK = "task-text-never-in-a-notice-41c9"
ANSWER_MARK = "answer-text-never-in-a-notice-77d2"
# Appends the notice from stdin to LOG and prints it and its own argv (both to be redacted in
# the evidence); then, if GATE is given, waits for that file to exist.
RECEIVER = """
import os, sys, time
line = sys.stdin.read()
with open(sys.argv[1], "a") as log:
    log.write(line if line.endswith("\\n") else line + "\\n")
print("received", len(line), "bytes", os.environ.get("AGENT_RUN_NOTICE_ID"), line)
print("argv", *sys.argv[1:])  # the evidence must show these values redacted
if len(sys.argv) > 2:
    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.05)
"""


@pytest.fixture
def receiver(workdir: Path) -> Path:
    path = workdir.parent / f"{workdir.name}-receiver.py"
    path.write_text(RECEIVER)
    yield path
    path.unlink(missing_ok=True)


def start(daemon, workdir, task, notify):
    return daemon.call("start", {"task": task, "workdir": str(workdir), "notify": notify})


def status_when(daemon, agent_id, states, timeout=60.0):
    def settled():
        status = daemon.call("delivery_status", {"agent_id": agent_id})
        return status if status["state"] in states else None

    return wait_for(settled, timeout=timeout, what=f"a notice of {agent_id} in {states}")


def test_command_notice_delivered_with_evidence_and_only_trusted_fields(daemon, workdir, receiver):
    log = workdir.parent / f"{workdir.name}-notices.log"
    argv = [sys.executable, str(receiver), str(log)]
    agent = start(
        daemon,
        workdir,
        f"# {TASK_MARK}\nanswer: {ANSWER_MARK}",
        {"transport": "command", "argv": argv},
    )
    assert daemon.call("delivery_status", {"agent_id": agent["id"]})["transport"] == "command"
    status = status_when(daemon, agent["id"], {"delivered"})
    assert status["attempts"] == 1
    evidence = status["last_attempt"]
    assert evidence["classifier"] == "success" and evidence["exit_status"] == 0
    assert evidence["stdin_bytes"] > 0 and evidence["stdout_bytes"] > 0
    notice = json.loads(log.read_text())
    answer = daemon.call("answer", {"agent_id": agent["id"]})
    assert notice == status["notices"][0]["body"]
    assert notice["notice_id"] == status["notices"][0]["id"]
    assert notice["agent_id"] == agent["id"] and notice["state"] == "succeeded"
    assert notice["answer_sha256"] == answer["sha256"]
    assert notice["runtime"] == "demo" and notice["model"] == "demo-1"
    text = log.read_text()
    assert TASK_MARK not in text and ANSWER_MARK not in text
    assert len(text.encode()) <= NOTICE_MAX_BYTES + 1
    # The tail is what the receiver printed, the notice it echoed included (trusted fields, the
    # status's `body`), its newlines as newlines; argv values (they may hold a secret) redacted.
    tail = evidence["stdout_tail"]
    assert tail == f"received {len(text)} bytes {notice['notice_id']} {text}\nargv [REDACTED]\n"
    assert str(log) not in json.dumps(status["last_attempt"])
    log.unlink()


def test_command_nonzero_exit_retries_with_backoff_then_fails(daemon, home, workdir):
    argv = ["/bin/sh", "-c", "cat >/dev/null; echo 'refused by the receiver' >&2; exit 3"]
    agent = start(
        daemon,
        workdir,
        "answer: x",
        {"transport": "command", "argv": argv, "max_attempts": 2},
    )
    first = status_when(daemon, agent["id"], {"retry_wait"})
    assert first["attempts"] == 1
    assert first["last_attempt"]["classifier"] == "exit"
    assert first["last_attempt"]["exit_status"] == 3
    assert "refused by the receiver" in first["last_attempt"]["stderr_tail"]
    assert first["last_error"] == "the program exited with status 3"
    wait_at = first["notices"][0]["next_attempt_at"]
    final = status_when(daemon, agent["id"], {"failed"})
    assert final["attempts"] == 2
    rows = db_rows(home, "SELECT updated_at FROM notices")
    assert rows[0]["updated_at"] >= wait_at  # the second send waited for its backoff


def test_delivery_status_shows_what_the_receiver_printed_once_escaped(daemon, workdir):
    """The README's receiver (`tee`) echoes the notice: the tail is that notice as JSON, not
    `[REDACTED]\\u000a`; a control character it prints is still shown escaped, never raw."""
    log = workdir.parent / f"{workdir.name}-tee.log"
    printf = "printf 'bell\\007 tab\\tend\\n'"
    argv = ["/bin/sh", "-c", f"/usr/bin/tee -a {log}; {printf}"]
    agent = start(daemon, workdir, "answer: x", {"transport": "command", "argv": argv})
    status = status_when(daemon, agent["id"], {"delivered"})
    tail = status["last_attempt"]["stdout_tail"]
    first, second = tail.splitlines()
    assert json.loads(first) == status["notices"][0]["body"] == json.loads(log.read_text())
    assert second == "bell\\u0007 tab\tend" and "[REDACTED]" not in tail
    log.unlink()


def test_command_timeout_is_killed_with_evidence(daemon, workdir):
    argv = ["/bin/sh", "-c", "echo started; exec sleep 60"]
    agent = start(
        daemon,
        workdir,
        "answer: x",
        {"transport": "command", "argv": argv, "timeout_seconds": 0.5, "max_attempts": 1},
    )
    status = status_when(daemon, agent["id"], {"failed"})
    evidence = status["last_attempt"]
    assert evidence["classifier"] == "timeout"
    assert evidence["duration_seconds"] >= 0.5
    assert evidence["exit_status"] == -9
    assert "started" in evidence["stdout_tail"]


def test_a_receiver_slower_than_its_timeout_gets_the_notice_once(daemon, workdir):
    """It read the whole notice, then outlived its timeout: the notice reached it, so it ends
    `delivered` (`received_timeout`, the slowness said in last_error), never sent again. One
    that had not read it is sent again (`timeout`, test_command_timeout_is_killed_...)."""
    log = workdir.parent / f"{workdir.name}-slow.log"
    argv = ["/bin/sh", "-c", f"cat >> {log}; exec sleep 60"]
    notify = {"transport": "command", "argv": argv, "timeout_seconds": 1, "max_attempts": 3}
    agent = start(daemon, workdir, "answer: x", notify)
    status = status_when(daemon, agent["id"], {"delivered", "failed"}, timeout=120)
    assert (status["state"], status["attempts"]) == ("delivered", 1), status
    assert status["last_attempt"]["classifier"] == "received_timeout"
    assert status["last_error"].startswith("the program read the whole notice, then was killed")
    [received] = [json.loads(line) for line in log.read_text().splitlines()]
    assert received == status["notices"][0]["body"]
    log.unlink()


def test_command_missing_binary_is_a_spawn_failure_with_errno(daemon, workdir):
    """The program was there at admission and is gone when the agent ends."""
    program = workdir.parent / f"{workdir.name}-notifier"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    go = workdir / "go"
    agent = start(
        daemon,
        workdir,
        f"steps: 3000\nstep_seconds: 0.1\nuntil: {go}\nanswer: x",
        {"transport": "command", "argv": [str(program), "--flag"], "max_attempts": 1},
    )
    program.unlink()
    go.touch()
    status = status_when(daemon, agent["id"], {"failed"}, timeout=120)
    evidence = status["last_attempt"]
    assert evidence["classifier"] == "spawn"
    assert evidence["errno"] == 2
    assert evidence["exit_status"] is None
    assert status["last_error"].startswith("the program could not be started")


@pytest.mark.parametrize(
    ("notify", "field", "said"),
    [
        ({"argv": ["{missing}", "--flag"]}, "notify.command.argv", "is not an executable file"),
        ({"argv": ["{workdir}"]}, "notify.command.argv", "is not an executable file"),
        ({"argv": ["agent-run-no-such-notifier"]}, "notify.command.argv", "daemon's PATH"),
        (
            {"transport": "codex_queue", "thread_id": "t1", "binary": "{missing}"},
            "notify.codex_queue.binary",
            "is not an executable file",
        ),
    ],
)
def test_a_notice_program_that_cannot_start_is_refused_at_admission(
    daemon, home, workdir, notify, field, said
):
    """Checked when the agent is admitted, not discovered when it ends: nothing is admitted."""
    names = {"missing": str(workdir / "no-such-program"), "workdir": str(workdir)}
    target = {"transport": "command", **notify}
    target = json.loads(json.dumps(target).replace("{missing}", names["missing"]).replace(
        "{workdir}", names["workdir"]))  # fmt: skip
    for tool, params in (
        ("start", {"task": "answer: x", "workdir": str(workdir)}),
        (
            "batch_start",
            {"workflow": "repeated", "project": str(workdir), "runs": 1, "prompt": "answer: x"},
        ),  # fmt: skip
    ):
        with pytest.raises(DomainError) as info:
            daemon.call(tool, {**params, "notify": target})
        assert (info.value.code, info.value.field) == ("InvalidRequest", field), info.value
        assert said in info.value.message
    assert db_rows(home, "SELECT count(*) AS n FROM agents")[0]["n"] == 0
    assert db_rows(home, "SELECT count(*) AS n FROM batches")[0]["n"] == 0


def test_notify_is_validated_naming_the_field(daemon, home, workdir):
    cases = [
        ({"transport": "pigeon"}, "notify"),
        ({"transport": "command", "argv": []}, "notify.command.argv"),
        ({"transport": "codex_queue"}, "notify.codex_queue.thread_id"),
        ({"transport": "codex_queue", "thread_id": "a b"}, "notify.codex_queue.thread_id"),
        ({"transport": "command", "argv": ["x"], "max_attempts": 0}, "notify.command.max_attempts"),
        # a NUL byte cannot be passed to a program: refused here, never stuck at the send
        ({"transport": "command", "argv": ["/bin/echo", "a\x00b"]}, "notify.command.argv.1"),
        (
            {"transport": "codex_queue", "thread_id": "t1", "binary": "/bin/co\x00dex"},
            "notify.codex_queue.binary",
        ),
        (
            {"transport": "codex_queue", "thread_id": "t1", "codex_home": "relative/home"},
            "notify.codex_queue.codex_home",
        ),
    ]
    for notify, field in cases:
        with pytest.raises(DomainError) as info:
            start(daemon, workdir, "answer: x", notify)
        assert info.value.field == field, (notify, info.value.to_data())
    assert db_rows(home, "SELECT count(*) AS n FROM agents")[0]["n"] == 0


def test_each_move_of_a_notice_is_an_event_so_changes_reports_a_delivery(daemon, workdir, receiver):
    # The web page learns of a delivery only through `changes`: a notice delivered after the
    # agent's last event must still move the revision and name the agent.
    log, gate = workdir / "moves.log", workdir / "moves.gate"  # removed with the workdir
    argv = [sys.executable, str(receiver), str(log), str(gate)]
    agent = start(daemon, workdir, "answer: done", {"transport": "command", "argv": argv})
    status_when(daemon, agent["id"], {"sending"})
    wait_for(log.exists, what="the receiver holding the notice at its gate")
    before = daemon.call("changes", {"after_revision": 2**62})["revision"]
    gate.touch()
    status_when(daemon, agent["id"], {"delivered"})
    moved = daemon.call("changes", {"after_revision": before})
    assert moved["revision"] > before and moved["agents"] == [agent["id"]]
    notices = daemon.call("events", {"agent_id": agent["id"], "kinds": ["notice"]})["items"]
    assert [e["data"]["state"] for e in notices] == ["pending", "sending", "delivered"]
    execution = daemon.call("agent", {"agent_id": agent["id"]})["execution"]["id"]
    assert {e["execution_id"] for e in notices} == {execution}


def test_delivery_status_of_an_agent_without_notify_and_an_unknown_agent(daemon, workdir):
    agent = daemon.call("start", {"task": "answer: x", "workdir": str(workdir)})
    status = daemon.call("delivery_status", {"agent_id": agent["id"]})
    assert status["transport"] is None and status["notices"] == []
    with pytest.raises(DomainError) as info:
        daemon.call("delivery_status", {"agent_id": "ag_0000000000nothere"})
    assert info.value.field == "agent_id"


def test_kill9_daemon_with_notices_owed_and_one_mid_send_loses_none(
    daemon, home, workdir, receiver
):
    log = workdir.parent / f"{workdir.name}-k9.log"
    gate = workdir.parent / f"{workdir.name}-k9.gate"
    notify = {"transport": "command", "argv": [sys.executable, str(receiver), str(log), str(gate)]}
    first = start(daemon, workdir, "answer: first", notify)
    wait_for(lambda: log.exists() and log.read_text(), what="the first notice mid-send")
    slow = [
        start(daemon, workdir, f"steps: 15\nstep_seconds: 0.1\nanswer: slow {n}", notify)
        for n in range(3)
    ]
    ids = [a["id"] for a in slow]
    executions = "SELECT state FROM executions WHERE agent_id IN (?, ?, ?)"
    wait_for(
        lambda: all(r["state"] == "running" for r in db_rows(home, executions, tuple(ids))),
        what="the slow agents to run under their supervisors",
    )
    daemon.kill9()  # the first notice is being sent; the others are owed once their agents end
    wait_for(
        lambda: all(r["state"] == "succeeded" for r in db_rows(home, executions, tuple(ids))),
        timeout=90,
        what="the agents to end while the daemon is dead",
    )
    gate.touch()
    daemon.start()
    for agent_id in [first["id"], *ids]:
        status_when(daemon, agent_id, {"delivered"}, timeout=90)
    received = [json.loads(line)["agent_id"] for line in log.read_text().splitlines()]
    assert received.count(first["id"]) == 2  # ambiguous: the dead daemon may have sent it
    for agent_id in ids:
        assert received.count(agent_id) == 1, received
    first_status = daemon.call("delivery_status", {"agent_id": first["id"]})
    assert first_status["notices"][0]["ambiguous_sends"] == 1
    for agent_id in ids:
        assert (
            daemon.call("delivery_status", {"agent_id": agent_id})["notices"][0]["ambiguous_sends"]
            == 0
        )
    log.unlink()
    gate.unlink()


def test_backoff_and_notice_bounds():
    assert [backoff_seconds(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [2, 4, 8, 16, 32, 60, 60]
    body = json.loads(
        build_notice("nt_x", {"agent_id": "ag_1", "state": "failed", "model": "m\x1b[2J\x07" * 50})
    )
    assert "\x1b" not in body["model"] and "\\u001b" in body["model"]
    assert len(build_notice("nt_x", {"model": "é" * 5000}).encode()) <= NOTICE_MAX_BYTES


def test_batch_notice_when_it_settles_plus_one_per_run_when_asked(batch_project, receiver):
    from tests.batch_harness import wait_batch

    log = batch_project.repo.parent / "batch-notices.log"
    argv = [sys.executable, str(receiver), str(log)]
    notify = {"transport": "command", "argv": argv}
    daemon = batch_project.daemon
    batch = batch_project.start(
        "repeated",
        runs=2,
        prompt=f"# {TASK_MARK}\nanswer: {ANSWER_MARK}",
        notify=notify,
        notify_runs=True,
    )
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "completed", done
    agents = [run["agent_id"] for run in done["runs"]]
    for agent_id in agents:
        status_when(daemon, agent_id, {"delivered"})

    def all_received():
        lines = log.read_text().splitlines() if log.exists() else []
        notices = [json.loads(line) for line in lines]
        return notices if len(notices) == 3 else None

    notices = wait_for(all_received, timeout=60, what="the batch's and its runs' notices")
    batch_notice = [n for n in notices if "batch_id" in n]
    assert len(batch_notice) == 1
    assert batch_notice[0]["batch_id"] == batch["id"] and batch_notice[0]["state"] == "completed"
    assert sorted(n["agent_id"] for n in notices if "agent_id" in n) == sorted(agents)
    assert TASK_MARK not in log.read_text() and ANSWER_MARK not in log.read_text()


def test_batch_without_notify_runs_sends_only_the_batch_notice(batch_project, receiver):
    from tests.batch_harness import wait_batch

    log = batch_project.repo.parent / "batch-only.log"
    notify = {"transport": "command", "argv": [sys.executable, str(receiver), str(log)]}
    batch = batch_project.start("repeated", runs=2, prompt="answer: x", notify=notify)
    done = wait_batch(batch_project.daemon, batch["id"])
    # The file exists as soon as the receiver opens it: wait for its line, not for the file.
    _batch_notices(log, 1)
    for run in done["runs"]:
        status = batch_project.daemon.call("delivery_status", {"agent_id": run["agent_id"]})
        assert status["transport"] is None
    notices = [json.loads(line) for line in log.read_text().splitlines()]
    assert [n["batch_id"] for n in notices] == [batch["id"]]


def _pid_in(path: Path) -> int:
    return int(
        wait_for(lambda: path.exists() and path.read_text().strip(), what=f"a pid in {path}")
    )


def _kill(pid: int) -> None:
    import os
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("spawn", ["sleep 100", "setsid sleep 100"])
def test_a_receiver_that_exits_0_leaving_a_child_on_its_output_is_delivered(daemon, workdir, spawn):
    """The program's own exit decides, not its pipes' end: a child left holding stdout and
    stderr (in its group, or `setsid`'d out of it) neither makes it a timeout nor delays it."""
    pidfile = workdir.parent / f"{workdir.name}-child.pid"
    script = f"cat >/dev/null; echo taken; {spawn} & echo $! > {pidfile}; exit 0"
    notify = {"transport": "command", "argv": ["/bin/sh", "-c", script], "timeout_seconds": 20}
    agent = start(daemon, workdir, "answer: x", notify)
    try:
        status = status_when(daemon, agent["id"], {"delivered", "retry_wait", "failed"})
        evidence = status["last_attempt"]
        assert status["state"] == "delivered", status
        assert (status["attempts"], evidence["classifier"], evidence["exit_status"]) == (
            1,
            "success",
            0,
        )
        assert evidence["duration_seconds"] < 10, evidence  # not held until the timeout
        assert "taken" in evidence["stdout_tail"]
    finally:
        _kill(_pid_in(pidfile))


def test_a_timeout_ends_on_time_even_with_a_setsid_grandchild_holding_the_pipes(daemon, workdir):
    """At the timeout the program's group is killed (its child in the group dies with it) and
    the attempt ends, although a `setsid`'d grandchild outside the group still holds its pipes."""
    from agent_run.system.processes import Liveness, ProcessIdentity, current

    group_pid = workdir.parent / f"{workdir.name}-group.pid"
    away_pid = workdir.parent / f"{workdir.name}-away.pid"
    script = (
        f"sleep 100 & echo $! > {group_pid}; setsid sleep 100 & echo $! > {away_pid}; "
        "echo started; exec sleep 100"
    )
    notify = {
        "transport": "command",
        "argv": ["/bin/sh", "-c", script],
        "timeout_seconds": 1.0,
        "max_attempts": 1,
    }
    agent = start(daemon, workdir, "answer: x", notify)
    try:
        in_group = ProcessIdentity.of(_pid_in(group_pid))
        assert in_group is not None
        status = status_when(daemon, agent["id"], {"failed"}, timeout=30)
        evidence = status["last_attempt"]
        assert evidence["classifier"] == "timeout" and evidence["exit_status"] == -9
        assert 1.0 <= evidence["duration_seconds"] < 10, evidence
        assert "started" in evidence["stdout_tail"]
        wait_for(
            lambda: current().liveness(in_group) is Liveness.DEAD,
            what="the receiver's own child killed with its group",
        )
    finally:
        _kill(_pid_in(group_pid))
        _kill(_pid_in(away_pid))


def test_an_unexpected_failure_while_sending_is_an_attempt_with_evidence_never_stuck(
    daemon, home, workdir
):
    """A stored target the program cannot be run with (a NUL byte in argv, as a row written
    before admission refused it would hold) fails inside the send: it is recorded as an attempt
    (`error`, what was raised, no argv value), retried with backoff, then `failed`."""
    import sqlite3

    secret = "argv-value-never-in-evidence-5be1"
    notify = {"transport": "command", "argv": ["/bin/echo", secret], "max_attempts": 2}
    agent = start(daemon, workdir, "steps: 30\nstep_seconds: 0.1\nanswer: x", notify)
    broken = json.dumps({**notify, "argv": ["/bin/echo", secret + "\x00"], "timeout_seconds": 30})
    with sqlite3.connect(home.db_path, timeout=30) as conn:
        changed = conn.execute(
            "UPDATE notify_targets SET target_json = ? WHERE agent_id = ?"
            " AND NOT EXISTS (SELECT 1 FROM notices n WHERE n.target_id = notify_targets.id)",
            (broken, agent["id"]),
        ).rowcount
    assert changed == 1  # changed before the agent ended: no notice existed yet
    first = status_when(daemon, agent["id"], {"retry_wait", "failed"})
    assert first["state"] == "retry_wait" and first["attempts"] == 1, first
    evidence = first["last_attempt"]
    assert evidence["classifier"] == "error", evidence
    assert evidence["error"].startswith("ValidationError: command.argv.1: ")
    assert "NUL byte" in evidence["error"]
    assert first["last_error"].startswith("the send failed inside agent-run")
    final = status_when(daemon, agent["id"], {"failed"})
    assert final["attempts"] == 2
    assert secret not in json.dumps(final["last_attempt"]) and secret not in final["last_error"]


def test_an_attempt_whose_outcome_cannot_be_written_is_retried_not_left_sending(
    home, workdir, receiver
):
    """The receiver succeeds while the database is locked by another writer for longer than the
    daemon's busy timeout (`daemon.busy_timeout_seconds`, 2 s here), so the outcome cannot be
    recorded: the notice is not left `sending` but retried once the database is free
    (ambiguous: the receiver sees it twice)."""
    config = (home.root / "config.toml").read_text()
    config = config.replace("[daemon]\n", "[daemon]\nbusy_timeout_seconds = 2.0\n", 1)
    (home.root / "config.toml").write_text(config)
    daemon = DaemonProcess(home).start()
    try:
        _outcome_cannot_be_written(daemon, home, workdir, receiver)
    finally:
        daemon.stop()


def _outcome_cannot_be_written(daemon, home, workdir, receiver) -> None:
    log = workdir.parent / f"{workdir.name}-locked.log"
    gate = workdir.parent / f"{workdir.name}-locked.gate"
    notify = {"transport": "command", "argv": [sys.executable, str(receiver), str(log), str(gate)]}
    agent = start(daemon, workdir, "answer: x", notify)
    wait_for(lambda: log.exists() and log.read_text(), what="the notice mid-send")
    daemon_log = home.root / "logs" / "daemon.log"
    lock = sqlite3.connect(home.db_path, timeout=30, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # every writer of the daemon waits, then gives up
        gate.touch()
        wait_for(
            lambda: "notice.record_failed" in daemon_log.read_text(),
            timeout=90,
            what="the daemon to fail to record the attempt",
        )
    finally:
        lock.rollback()
        lock.close()
    status = status_when(daemon, agent["id"], {"delivered"}, timeout=60)
    assert status["notices"][0]["ambiguous_sends"] == 1 and status["attempts"] == 2
    received = [json.loads(line)["agent_id"] for line in log.read_text().splitlines()]
    assert received == [agent["id"], agent["id"]]
    log.unlink()
    gate.unlink()


def _batch_notices(log: Path, n: int) -> list[dict]:
    def arrived():
        lines = log.read_text().splitlines() if log.exists() else []
        notices = [json.loads(line) for line in lines]
        return notices if len(notices) >= n else None

    return wait_for(arrived, timeout=90, what=f"{n} batch notice(s)")


def _batch_status_when(daemon, batch_id, count):
    def settled():
        status = daemon.call("delivery_status", {"batch_id": batch_id})
        done = [n for n in status["notices"] if n["state"] == "delivered"]
        return status if len(done) >= count else None

    return wait_for(settled, timeout=60, what=f"{count} delivered notice(s) of {batch_id}")


def test_a_blocked_batch_is_announced_and_again_when_it_settles_after_a_rerun(
    batch_project, receiver
):
    """Blocked waits on the user: a notice. The rerun reopens it; completed: a second notice.
    `delivery_status` shows both by the batch's id, and one by its notice id."""
    from tests.batch_harness import CANDIDATE, runs_of, wait_batch

    daemon = batch_project.daemon
    log = batch_project.repo.parent / "blocked-notices.log"
    notify = {"transport": "command", "argv": [sys.executable, str(receiver), str(log)]}
    batch = batch_project.start_ranked_pair(
        "score: 70", prompt=f"require: go.flag\n{CANDIDATE}", notify=notify
    )
    blocked = wait_batch(daemon, batch["id"], states=("blocked",))
    [first] = _batch_notices(log, 1)
    assert (first["batch_id"], first["state"], first["settle"]) == (batch["id"], "blocked", 1)
    assert first["workflow"] == "ranked" and "state_reason" not in first
    status = _batch_status_when(daemon, batch["id"], 1)
    assert (status["batch_id"], status["agent_id"], status["transport"]) == (
        batch["id"],
        None,
        "command",
    )
    candidate = runs_of(blocked, "candidate")[0]
    (Path(candidate["worktree"]) / "go.flag").write_text("go\n")
    daemon.call("run_rerun", {"run_id": candidate["id"]})
    wait_batch(daemon, batch["id"], states=("completed",))
    second = _batch_notices(log, 2)[1]
    assert (second["state"], second["settle"]) == ("completed", 2)
    assert second["notice_id"] != first["notice_id"]
    status = _batch_status_when(daemon, batch["id"], 2)
    assert [n["body"]["state"] for n in status["notices"]] == ["blocked", "completed"]
    assert status["state"] == "delivered" and status["attempts"] == 1
    one = daemon.call("delivery_status", {"notice_id": first["notice_id"]})
    assert [n["id"] for n in one["notices"]] == [first["notice_id"]]
    assert one["batch_id"] == batch["id"] and one["state"] == "delivered"
    assert len(_batch_notices(log, 2)) == 2  # nothing else was announced


def test_a_completed_batch_reopened_by_a_rerun_is_announced_again(batch_project, receiver):
    from tests.batch_harness import wait_batch

    daemon = batch_project.daemon
    log = batch_project.repo.parent / "reopened-notices.log"
    notify = {"transport": "command", "argv": [sys.executable, str(receiver), str(log)]}
    batch = batch_project.start("repeated", runs=1, prompt="answer: ok", notify=notify)
    done = wait_batch(daemon, batch["id"], states=("completed",))
    _batch_status_when(daemon, batch["id"], 1)
    daemon.call("run_rerun", {"run_id": done["runs"][0]["id"]})
    wait_for(
        lambda: daemon.call("batch", {"batch_id": batch["id"]})["runs"][0]["attempt"] == 2,
        what="the rerun to start",
    )
    wait_batch(daemon, batch["id"], states=("completed",))
    notices = _batch_notices(log, 2)
    assert [(n["state"], n["settle"]) for n in notices] == [("completed", 1), ("completed", 2)]


def test_delivery_status_takes_exactly_one_id_and_names_the_field(daemon, workdir):
    agent = daemon.call("start", {"task": "answer: x", "workdir": str(workdir)})
    cases = [
        ({}, "InvalidRequest", "agent_id"),
        ({"agent_id": agent["id"], "batch_id": "bt_0000nothere"}, "InvalidRequest", "batch_id"),
        ({"batch_id": "bt_0000nothere"}, "BatchNotFound", "batch_id"),
        ({"notice_id": "nt_0000nothere"}, "InvalidRequest", "notice_id"),
        ({"notice_id": "ag_wrongprefix"}, "InvalidParams", "notice_id"),
    ]
    for params, code, field in cases:
        with pytest.raises(DomainError) as info:
            daemon.call("delivery_status", params)
        assert (info.value.code, info.value.field) == (code, field), (params, info.value)


# Appends the notice from stdin with the pid of the process that ran it (its dispatcher) to LOG;
# then, if GATE is given, waits for that file to exist.
SENDER_RECEIVER = """
import json, os, sys, time
notice = json.loads(sys.stdin.read())
with open(sys.argv[1], "a") as log:
    log.write(json.dumps({"agent_id": notice["agent_id"], "sender": os.getppid()}) + "\\n")
if len(sys.argv) > 2:
    deadline = time.monotonic() + 120
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def test_one_dispatcher_sends_under_the_lease_and_a_dead_holder_is_taken_over(home, workdir):
    """A second dispatcher in its own process (the real class; two daemons cannot share a home's
    flock) holds the lease: the daemon sends nothing while it lives, so every notice is sent
    once, by the holder. Killed -9 mid-send, its lease is taken over at once (its holder is
    proved dead): the daemon resends that notice (ambiguous) and sends the rest."""
    import subprocess

    from tests.harness import DaemonProcess

    script = workdir.parent / f"{workdir.name}-sender.py"
    script.write_text(SENDER_RECEIVER)
    log = workdir.parent / f"{workdir.name}-lease.log"
    gate = workdir.parent / f"{workdir.name}-lease.gate"
    lease = "SELECT holder_pid FROM notice_lease"
    from agent_run.store.db import connect

    connect(home.db_path).close()  # migrated before either process reads it
    with open(home.root / "lone-dispatcher.out", "ab") as out:
        lone = subprocess.Popen(
            [sys.executable, "-m", "tests.support.lone_dispatcher", str(home.root)],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    daemon = None
    try:
        wait_for(lambda: [r[0] for r in db_rows(home, lease)] == [lone.pid], what="the lease")
        daemon = DaemonProcess(home).start()

        def sent(n):
            lines = log.read_text().splitlines() if log.exists() else []
            return [json.loads(line) for line in lines] if len(lines) >= n else None

        plain = {"transport": "command", "argv": [sys.executable, str(script), str(log)]}
        first = [start(daemon, workdir, f"answer: {n}", plain)["id"] for n in range(3)]
        for agent_id in first:
            status_when(daemon, agent_id, {"delivered"})
        assert sorted(s["agent_id"] for s in sent(3)) == sorted(first)
        assert {s["sender"] for s in sent(3)} == {lone.pid}  # the holder sent each, once
        assert [r[0] for r in db_rows(home, lease)] == [lone.pid]

        gated = {**plain, "argv": [*plain["argv"], str(gate)]}
        mid = start(daemon, workdir, "answer: mid-send", gated)["id"]
        wait_for(lambda: sent(4), what="the holder mid-send")
        lone.kill()
        lone.wait()
        later = start(daemon, workdir, "answer: after", plain)["id"]
        status_when(daemon, later, {"delivered"})
        gate.touch()
        status = status_when(daemon, mid, {"delivered"})
        assert status["notices"][0]["ambiguous_sends"] == 1
        by_agent = {}
        for line in sent(6):
            by_agent.setdefault(line["agent_id"], []).append(line["sender"])
        assert by_agent[mid] == [lone.pid, daemon.proc.pid]  # ambiguous: sent again, by the daemon
        assert by_agent[later] == [daemon.proc.pid]
        assert [r[0] for r in db_rows(home, lease)] == [daemon.proc.pid]
    finally:
        gate.touch()
        if lone.poll() is None:
            lone.kill()
            lone.wait()
        if daemon is not None:
            daemon.stop()


# Refuses the first three sends (exit 1, counting them in MARK), takes the next: appends the
# notice to LOG. After the third refusal the notice waits 8 s: time to kill the daemon then.
FAILS_THRICE = """
import os, sys
line = sys.stdin.read()
refused = open(sys.argv[2]).read() if os.path.exists(sys.argv[2]) else ""
if len(refused) < 3:
    open(sys.argv[2], "a").write("x")
    sys.exit(1)
with open(sys.argv[1], "a") as log:
    log.write(line if line.endswith("\\n") else line + "\\n")
"""


def test_the_lease_is_renewed_past_half_its_time_not_at_every_pass(tmp_path):
    from agent_run.store.db import connect, write
    from agent_run.store.notices import take_lease

    conn = connect(tmp_path / "state.db")
    expiry = "SELECT holder, expires_at FROM notice_lease"

    def take(holder: str, now: float, dead: bool = False) -> tuple[bool, str | None]:
        with write(conn):
            return take_lease(conn, holder, 1, now, 30.0, holder_dead=dead)

    try:
        assert take("boot:1:5", 1000.0) == (True, None)
        assert tuple(conn.execute(expiry).fetchone()) == ("boot:1:5", 1030.0)
        assert take("boot:1:5", 1014.0) == (True, None)  # 16 s left: held as it is, no write
        assert tuple(conn.execute(expiry).fetchone()) == ("boot:1:5", 1030.0)
        assert take("boot:1:5", 1016.0) == (True, None)  # 14 s left: renewed
        assert tuple(conn.execute(expiry).fetchone()) == ("boot:1:5", 1046.0)
        assert take("boot:2:7", 1040.0) == (False, None)  # another's, live, not expired
        assert take("boot:2:7", 1041.0, dead=True) == (True, "boot:1:5")  # its holder proved dead
        assert take("boot:1:5", 1042.0) == (False, None)  # and now it is the other's
        assert take("boot:1:5", 1072.0) == (True, "boot:2:7")  # expired
    finally:
        conn.close()


def test_an_idle_daemon_does_not_rewrite_the_lease_at_each_pass(daemon, home):
    """Each write of the row is a WAL frame: at every half-second pass that was ~8 KiB/s of
    writes from a daemon with nothing to do. It is renewed once half its 30 s have run."""
    lease = "SELECT expires_at FROM notice_lease"
    wait_for(lambda: db_rows(home, lease), what="the dispatcher's lease")
    passes = daemon.call("ping")["notice_passes"]
    seen = {db_rows(home, lease)[0][0]}

    def six_passes() -> bool:
        seen.add(db_rows(home, lease)[0][0])
        return daemon.call("ping")["notice_passes"] >= passes + 6

    wait_for(six_passes, interval=0.05, what="six dispatcher passes")
    assert len(seen) <= 2, f"the lease was written at {len(seen)} of ~6 passes"


def test_kill9_daemon_with_a_notice_in_retry_wait_retries_it_once_after_restart(
    daemon, home, workdir
):
    """A notice waiting for its retry (its sends refused) when the daemon is killed -9:
    the next daemon sends it when its backoff ends; delivered once, not counted ambiguous."""
    script = workdir.parent / f"{workdir.name}-fails-once.py"
    script.write_text(FAILS_THRICE)
    log = workdir.parent / f"{workdir.name}-retry.log"
    mark = workdir.parent / f"{workdir.name}-retry.mark"
    notify = {"transport": "command", "argv": [sys.executable, str(script), str(log), str(mark)]}
    agent = start(daemon, workdir, "answer: x", notify)
    wait_for(
        lambda: status_when(daemon, agent["id"], {"retry_wait"})["attempts"] == 3,
        what="the third refusal",
    )
    assert not log.exists()
    daemon.kill9()
    [row] = db_rows(home, "SELECT state, next_attempt_at FROM notices")
    assert row["state"] == "retry_wait"  # what the dead daemon left
    daemon.start()
    status = status_when(daemon, agent["id"], {"delivered"}, timeout=60)
    assert status["attempts"] == 4 and status["notices"][0]["ambiguous_sends"] == 0
    [received] = [json.loads(line) for line in log.read_text().splitlines()]
    assert received["agent_id"] == agent["id"]
    [after] = db_rows(home, "SELECT updated_at FROM notices")
    assert after["updated_at"] >= row["next_attempt_at"]  # its backoff was kept


def test_output_tails_are_bounded_in_bytes_not_characters(daemon, workdir):
    """Each tail is at most 2 KiB of UTF-8 however wide its characters (a cut character is
    dropped, never left half)."""
    script = "cat >/dev/null; i=0; while [ $i -lt 1500 ]; do printf 'éé'; i=$((i+1)); done"
    notify = {"transport": "command", "argv": ["/bin/sh", "-c", script]}
    agent = start(daemon, workdir, "answer: x", notify)
    evidence = status_when(daemon, agent["id"], {"delivered"})["last_attempt"]
    assert evidence["stdout_bytes"] == 6000
    tail = evidence["stdout_tail"]
    assert 2040 <= len(tail.encode()) <= 2048 and set(tail) == {"é"}, len(tail.encode())
