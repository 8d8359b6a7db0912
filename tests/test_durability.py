"""Durability under kill -9: of the daemon, of a supervisor; process identity and pid reuse."""

import os
import signal
from collections import Counter

from agent_run.supervisor.identity import Liveness, ProcessIdentity, liveness
from tests.harness import db_rows, engine_row, pgid_alive, wait_for


def test_kill9_daemon_leaves_running_agents_alive_and_all_complete(daemon, home, workdir):
    ids = [
        daemon.call(
            "start",
            {"task": f"steps: 40\nstep_seconds: 0.1\nanswer: agent {n}", "workdir": str(workdir)},
        )["id"]
        for n in range(5)
    ]
    states = [daemon.call("agent", {"agent_id": i})["state"] for i in ids]
    daemon.kill9()
    assert "succeeded" not in states, f"the daemon must die while they run: {states}"
    assert home.socket_path.exists()  # left behind: the new daemon must reclaim it
    daemon.start()
    for n, agent_id in enumerate(ids):
        result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
        assert result["agent"]["state"] == "succeeded", result
        assert daemon.call("answer", {"agent_id": agent_id})["text"] == f"agent {n}"
    for agent_id in ids:
        seqs = [
            r["agent_seq"]
            for r in db_rows(
                home, "SELECT agent_seq FROM events WHERE agent_id = ? ORDER BY seq", (agent_id,)
            )
        ]
        assert seqs == list(range(1, len(seqs) + 1)), "event seqs must be contiguous"
        contents = [
            r["content"]
            for r in db_rows(
                home, "SELECT content FROM messages WHERE agent_id = ? ORDER BY id", (agent_id,)
            )
        ]
        assert max(Counter(contents).values()) == 1, f"duplicated messages: {contents}"
        assert len(db_rows(home, "SELECT id FROM executions WHERE agent_id = ?", (agent_id,))) == 1


def test_kill9_supervisor_is_reconciled_to_lost_and_engine_group_killed(daemon, home, workdir):
    agent = daemon.call(
        "start", {"task": "steps: 2000\nstep_seconds: 0.05\nspawn: 300", "workdir": str(workdir)}
    )
    row = engine_row(home, agent["id"])
    engine_pgid = row["engine_pid"]
    wait_for(
        lambda: (
            len([p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == engine_pgid])
            >= 2
        ),
        what="the engine and its child",
    )
    os.kill(row["supervisor_pid"], signal.SIGKILL)
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 30})
    assert result["agent"]["state"] == "lost"
    assert result["agent"]["failure_kind"] == "supervisor_lost"
    wait_for(lambda: not pgid_alive(engine_pgid), timeout=10, what="the engine group to be gone")


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_identity_with_different_start_time_is_dead_not_alive():
    me = ProcessIdentity.current()
    assert liveness(me) is Liveness.ALIVE
    reused = ProcessIdentity(me.pid, me.start_ticks + 1, me.boot_id)
    assert liveness(reused) is Liveness.DEAD
    other_boot = ProcessIdentity(me.pid, me.start_ticks, "00000000-0000-0000-0000-000000000000")
    assert liveness(other_boot) is Liveness.DEAD


def test_zombie_supervisor_counts_as_dead():
    import subprocess

    proc = subprocess.Popen(["true"])
    ident = wait_for(lambda: ProcessIdentity.of(proc.pid))
    wait_for(
        lambda: open(f"/proc/{proc.pid}/stat").read().split(") ")[1][0] == "Z", what="a zombie"
    )
    assert liveness(ident) is Liveness.DEAD
    proc.wait()
    assert liveness(ident) is Liveness.DEAD


def test_live_supervisor_is_never_marked_lost(daemon, home, workdir):
    agent = daemon.call(
        "start", {"task": "steps: 30\nstep_seconds: 0.1\nanswer: ok", "workdir": str(workdir)}
    )
    # Several reconciliation passes (0.2 s apart) run while it works.
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    assert result["agent"]["state"] == "succeeded"
    states = [
        r["data"]
        for r in db_rows(
            home, "SELECT data FROM events WHERE agent_id = ? AND kind = 'state'", (agent["id"],)
        )
    ]
    assert not any('"lost"' in s for s in states)
