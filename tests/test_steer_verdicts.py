"""A steer's verdict when the agent's supervisor is slow to read it (SIGSTOP stands in for a
loaded machine): the reply given while it is unread says it is not taken yet and what decides
it; read later while the engine still runs, it is the engine's next turn and the answer; read
after the engine died, it is refused, never reported delivered."""

import os
import signal
from typing import Any

from agent_run.system.home import Home
from tests.harness import DaemonProcess, db_rows, engine_row, pgid_alive, wait_for

# A demo turn that lasts until the test lets it end (a flag file), however slow the machine.
HELD_TURN = "steps: 1000000\nstep_seconds: 0.05\nuntil: go.flag\nanswer: first turn"


def _start_held(daemon: DaemonProcess, workdir) -> tuple[dict[str, Any], Any]:
    agent = daemon.call("start", {"task": HELD_TURN, "workdir": str(workdir)})
    return agent, engine_row(daemon.home, agent["id"])


def _command(home: Home, command_id: int) -> Any:
    return db_rows(home, "SELECT * FROM commands WHERE id = ?", (command_id,))[0]


def test_a_steer_its_supervisor_reads_late_says_so_then_is_the_next_turn_and_the_answer(
    daemon: DaemonProcess, workdir
) -> None:
    agent, row = _start_held(daemon, workdir)
    os.kill(row["supervisor_pid"], signal.SIGSTOP)  # it reads no command meanwhile
    try:
        steer = daemon.call("steer", {"agent_id": agent["id"], "text": "answer: steered turn"})
        assert steer["state"] == "pending", steer
        assert steer["message"].startswith(
            f"not read yet by the agent's supervisor (command {steer['command_id']}): it is "
            "delivered if the engine is still running when the supervisor reads it, else refused"
        ), steer
    finally:
        os.kill(row["supervisor_pid"], signal.SIGCONT)
    wait_for(
        lambda: _command(daemon.home, steer["command_id"])["state"] == "delivered",
        what="the supervisor to deliver the steer",
    )
    (workdir / "go.flag").touch()  # the first turn ends; the steer is the next one
    with daemon.client(timeout=150) as client:
        done = client.call("wait", {"agent_id": agent["id"], "timeout_seconds": 120})
    assert done["agent"]["state"] == "succeeded", done
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "steered turn"


def test_a_steer_that_finds_the_engine_gone_is_refused_not_delivered(
    daemon: DaemonProcess, workdir
) -> None:
    agent, row = _start_held(daemon, workdir)
    os.kill(row["supervisor_pid"], signal.SIGSTOP)
    try:
        steer = daemon.call("steer", {"agent_id": agent["id"], "text": "answer: too late"})
        assert steer["state"] == "pending", steer
        os.killpg(row["engine_pid"], signal.SIGKILL)
        wait_for(lambda: not pgid_alive(row["engine_pid"]), what="the engine to be gone")
    finally:
        os.kill(row["supervisor_pid"], signal.SIGCONT)
    with daemon.client(timeout=150) as client:
        done = client.call("wait", {"agent_id": agent["id"], "timeout_seconds": 120})
    assert done["agent"]["state"] == "failed", done
    command = _command(daemon.home, steer["command_id"])
    assert command["state"] == "refused", dict(command)
    assert command["result"] == (
        "the engine takes no more input (its last turn ended, or it exited); start a follow-up "
        "instead"
    )
