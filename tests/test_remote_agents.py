"""Agents on another host over a real sshd (tests/ssh_harness.py): `start --host` runs the agent
under the host's own agent-run; its events, transcript, state and answer are mirrored into the
local store, so `wait`, `answer` and `transcript --follow` work here unchanged."""

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.system.home import Home
from tests.harness import DaemonProcess, cli, db_rows, make_home, remove_home
from tests.ssh_harness import RemoteHost, local_config, reachable, remote_host  # noqa: F401

pytestmark = [pytest.mark.sshd, pytest.mark.xdist_group("sshd")]


@pytest.fixture
def local(reachable: RemoteHost) -> Iterator[DaemonProcess]:  # noqa: F811
    home = make_home(local_config(reachable))
    daemon = DaemonProcess(home).start()
    yield daemon
    daemon.stop()
    remove_home(home)


def remote_workdir(host: RemoteHost) -> str:
    """A folder of the host's user, for its agents to work in."""
    path = host.user_home / "work"
    if not path.exists():
        done = host.as_user("mkdir", "-p", str(path))
        assert done.returncode == 0, done.stderr
    return str(path)


def remote_agent_id(home: Home, agent_id: str) -> str:
    [row] = db_rows(
        home,
        "SELECT r.remote_agent_id FROM remote_executions r JOIN executions e ON e.id = r.execution_id"
        " WHERE e.agent_id = ?",
        (agent_id,),
    )
    return str(row["remote_agent_id"])


def test_a_demo_agent_on_the_host_starts_waits_and_its_answer_is_verified_here(
    local: DaemonProcess,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    done = cli(
        local.home,
        "start",
        "--host",
        "box",
        "--workdir",  # the host's ~, left for the host to expand (not this CLI's)
        "~/" + Path(remote_workdir(reachable)).name,
        "--task",
        "steps: 3\nanswer: made on the host",
        "--wait",
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [waited] = [json.loads(line) for line in done.stdout.strip().splitlines()]
    agent = waited["agent"]
    assert agent["host"] == "box" and agent["state"] == "succeeded"
    assert agent["workdir"] == "~/work"
    answer = local.call("answer", {"agent_id": agent["id"]})
    assert answer["text"] == "made on the host"
    # Sealed in the local home, and the same bytes as the host sealed.
    local_file = Path(answer["path"])
    assert local_file.is_relative_to(local.home.root)
    assert hashlib.sha256(local_file.read_bytes()).hexdigest() == answer["sha256"]
    remote_id = remote_agent_id(local.home, agent["id"])
    [remote] = reachable.rows("SELECT * FROM executions WHERE agent_id = ?", (remote_id,))
    assert remote["state"] == "succeeded" and remote["answer_sha256"] == answer["sha256"]
    view = local.call("agent", {"agent_id": agent["id"]})
    assert view["state"] == "succeeded" and view["answer_verified"] is True
    assert view["host"] == "box" and view["sandbox"] == "none"  # the host's runtime says so
    # Every host event once, in order; the transcript is the host's.
    remote_seqs = [
        r["agent_seq"]
        for r in reachable.rows(
            "SELECT agent_seq FROM events WHERE agent_id = ? ORDER BY agent_seq", (remote_id,)
        )
    ]
    local_seqs = [
        json.loads(r["data"])["remote_seq"]
        for r in db_rows(
            local.home,
            "SELECT data FROM events WHERE agent_id = ? AND data LIKE '%remote_seq%' ORDER BY seq",
            (agent["id"],),
        )
    ]
    assert local_seqs == remote_seqs
    remote_messages = [
        r["content"]
        for r in reachable.rows(
            "SELECT content FROM messages WHERE agent_id = ? ORDER BY id", (remote_id,)
        )
    ]
    page = local.call("transcript", {"agent_id": agent["id"]})
    assert [item["content"] for item in page["items"]] == remote_messages


def test_transcript_follow_prints_the_hosts_messages_while_the_agent_runs(
    local: DaemonProcess,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    agent = local.call(
        "start",
        {
            "host": "box",
            "workdir": remote_workdir(reachable),
            "task": "steps: 12\nstep_seconds: 0.5\nanswer: followed",
        },
    )
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_run",
            "--home",
            str(local.home.root),
            "transcript",
            agent["id"],
            "--follow",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        first = json.loads(follow.stdout.readline())
        # The first line arrived while the agent was still running on the host.
        assert local.call("agent", {"agent_id": agent["id"]})["state"] in ("starting", "running")
        rest = [json.loads(line) for line in follow.stdout]
        assert follow.wait(timeout=120) == 0, follow.stderr.read() if follow.stderr else ""
    finally:
        follow.kill()
    contents = [first["content"], *(item["content"] for item in rest)]
    assert contents[-1] == "followed"
    assert sum("step" in c for c in contents) >= 12, contents
