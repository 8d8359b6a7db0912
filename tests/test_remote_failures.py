"""Failure semantics of agents on a host, caused for real against sshd (tests/ssh_harness.py):
a killed ssh connection resumes from the cursor with every event exactly once; a supervisor
killed on the host is `lost` on the host's proof; a host cut off makes its agents
`unreachable` (never lost, whatever the time) until its record says what happened; `abandon`;
cancel queued while cut off reaches the host's own queue when it is back."""

import json
import os
import signal
from collections.abc import Iterator

import pytest

from agent_run.domain.errors import AnswerIntegrity, DomainError
from agent_run.supervisor.identity import Liveness, ProcessIdentity, liveness
from agent_run.system.home import Home
from tests.harness import DaemonProcess, cli, db_rows, make_home, remove_home, wait_for
from tests.ssh_harness import RemoteHost, local_config, reachable, remote_host  # noqa: F401
from tests.test_cli_text import REPR
from tests.test_remote_agents import remote_agent_id, remote_workdir

pytestmark = [pytest.mark.sshd, pytest.mark.xdist_group("sshd")]

LONG = "steps: 16\nstep_seconds: 0.5\nanswer: {}"


@pytest.fixture
def local(reachable: RemoteHost) -> Iterator[DaemonProcess]:  # noqa: F811
    home = make_home(local_config(reachable))
    daemon = DaemonProcess(home).start()
    yield daemon
    daemon.stop()
    remove_home(home)


def start(local: DaemonProcess, host: RemoteHost, answer: str) -> str:
    agent = local.call(
        "start", {"host": "box", "workdir": remote_workdir(host), "task": LONG.format(answer)}
    )
    return str(agent["id"])


def state(local: DaemonProcess, agent_id: str) -> str:
    return str(local.call("agent", {"agent_id": agent_id})["state"])


def messages(local: DaemonProcess, agent_id: str) -> int:
    return len(local.call("transcript", {"agent_id": agent_id})["items"])


def remote_row(host: RemoteHost, remote_id: str):  # the host's own record of its execution
    [row] = host.rows("SELECT * FROM executions WHERE agent_id = ?", (remote_id,))
    return row


def assert_exactly_once(home: Home, host: RemoteHost, agent_id: str) -> None:
    """Every host event mirrored once, in order; the transcript the host's."""
    remote_id = remote_agent_id(home, agent_id)
    remote = [
        r["agent_seq"]
        for r in host.rows(
            "SELECT agent_seq FROM events WHERE agent_id = ? ORDER BY agent_seq", (remote_id,)
        )
    ]
    mirrored = [
        json.loads(r["data"])["remote_seq"]
        for r in db_rows(
            home,
            "SELECT data FROM events WHERE agent_id = ? AND json_extract(data, '$.remote_seq')"
            " IS NOT NULL ORDER BY seq",
            (agent_id,),
        )
    ]
    assert mirrored == remote and remote == list(range(1, len(remote) + 1))
    remote_text = [
        r["content"]
        for r in host.rows(
            "SELECT content FROM messages WHERE agent_id = ? ORDER BY id", (remote_id,)
        )
    ]
    local_text = [
        r["content"]
        for r in db_rows(
            home, "SELECT content FROM messages WHERE agent_id = ? ORDER BY id", (agent_id,)
        )
    ]
    assert local_text == remote_text


def test_a_killed_ssh_connection_resumes_with_every_event_exactly_once(
    local: DaemonProcess,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    agent_id = start(local, reachable, "kept running")
    wait_for(lambda: messages(local, agent_id) >= 3, timeout=60, what="mirrored messages")
    [box] = local.call("hosts")["items"]
    os.kill(box["ssh_pid"], signal.SIGKILL)  # the connection dies mid-run
    remote = remote_row(reachable, remote_agent_id(local.home, agent_id))
    assert remote["state"] == "running"  # the host's agent never noticed
    supervisor = ProcessIdentity(
        remote["supervisor_pid"], remote["supervisor_start_ticks"], remote["boot_id"]
    )
    assert liveness(supervisor) is Liveness.ALIVE
    wait_for(
        lambda: (
            (h := local.call("hosts")["items"][0])["connected"] and h["ssh_pid"] != box["ssh_pid"]
        ),
        timeout=60,
        what="a new link",
    )
    done = local.call("wait", {"agent_id": agent_id, "timeout_seconds": 90})
    assert done["agent"]["state"] == "succeeded", done
    assert local.call("answer", {"agent_id": agent_id})["text"] == "kept running"
    assert_exactly_once(local.home, reachable, agent_id)


def test_a_supervisor_killed_on_the_host_is_lost_on_the_hosts_proof(
    local: DaemonProcess,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    agent_id = start(local, reachable, "never")
    wait_for(lambda: state(local, agent_id) == "running", timeout=60, what="running")
    # A steer goes through the local queue to the host's own queue and comes back resolved.
    steered = local.call("steer", {"agent_id": agent_id, "text": "answer: steered"})
    assert steered["state"] in ("pending", "delivered"), steered

    def steer_resolved() -> bool:
        [row] = db_rows(local.home, "SELECT * FROM commands WHERE id = ?", (steered["command_id"],))
        return row["state"] == "delivered" and "host box" in row["result"]

    wait_for(steer_resolved, timeout=60, what="the steer's verdict from the host")
    remote = remote_row(reachable, remote_agent_id(local.home, agent_id))
    assert [
        r["kind"]
        for r in reachable.rows("SELECT kind FROM commands WHERE execution_id = ?", (remote["id"],))
    ] == ["steer"]
    os.kill(remote["supervisor_pid"], signal.SIGKILL)
    done = local.call("wait", {"agent_id": agent_id, "timeout_seconds": 90})
    assert done["agent"]["state"] == "lost", done
    assert done["agent"]["failure_kind"] == "supervisor_lost"
    # Its advice is what works for an agent on a host: start it again, since resume refuses it.
    advice = done["agent"]["execution"]["failure_advice"]
    assert "start the agent again" in advice and "cannot be resumed" in advice, advice
    with pytest.raises(DomainError) as refused:
        local.call("resume", {"agent_id": agent_id, "prompt": "answer: again"})
    assert refused.value.code == "NotResumable"
    # The proof is the host's: its reconciler wrote `lost`, this daemon copied it.
    assert remote_row(reachable, remote_agent_id(local.home, agent_id))["state"] == "lost"
    assert_exactly_once(local.home, reachable, agent_id)


def test_a_cut_off_host_makes_its_agents_unreachable_until_its_record_says(
    local: DaemonProcess,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    kept, given_up = start(local, reachable, "finished while cut off"), start(local, reachable, "x")
    tampered = start(local, reachable, "changed on the host after its seal")
    for agent_id in (kept, given_up, tampered):
        wait_for(lambda a=agent_id: messages(local, a) >= 1, timeout=60, what="a mirrored message")
    remote_kept = remote_agent_id(local.home, kept)
    host_daemon = local.call("hosts")["items"][0]["daemon_pid"]
    reachable.cut_off()  # sshd stopped, its sessions killed
    assert os.path.exists(f"/proc/{host_daemon}")  # the host itself runs on
    for agent_id in (kept, given_up):
        wait_for(
            lambda a=agent_id: state(local, a) == "unreachable", timeout=60, what="unreachable"
        )
    # The host finishes meanwhile; here nothing proves it, so nothing changes, however long.
    wait_for(
        lambda: remote_row(reachable, remote_kept)["state"] == "succeeded",
        timeout=90,
        what="the host's agent to finish",
    )
    # An answer changed on the host after its seal: the host's own re-hash refuses it later.
    remote_tampered = remote_row(reachable, remote_agent_id(local.home, tampered))
    wait_for(
        lambda: remote_row(reachable, remote_tampered["agent_id"])["state"] == "succeeded",
        timeout=90,
        what="the second host agent to finish",
    )
    answer_file = (
        reachable.home
        / "agents"
        / remote_tampered["agent_id"]
        / remote_tampered["id"]
        / "answer.md"
    )
    answer_file.write_text("not what was sealed")
    waited = local.call("wait", {"agent_id": kept, "timeout_seconds": 2})
    assert waited["timed_out"] and waited["agent"]["state"] == "unreachable"
    [box] = local.call("hosts")["items"]
    assert not box["connected"] and box["unreachable_agents"] == 3
    assert box["last_error_code"] == "HostUnreachable"
    # A running agent cannot be abandoned; an unreachable one can, by the user only.
    shown = cli(local.home, "--format", "text", "abandon", given_up)  # its text, where it succeeds
    assert shown.returncode == 0 and given_up in shown.stdout, shown.stdout + shown.stderr
    assert not REPR.search(shown.stdout), shown.stdout
    gave_up = local.call("agent", {"agent_id": given_up})
    assert gave_up["state"] == "failed"
    assert local.call("agent", {"agent_id": given_up})["failure_kind"] == "abandoned"
    reachable.restore()
    done = local.call("wait", {"agent_id": kept, "timeout_seconds": 90})
    assert done["agent"]["state"] == "succeeded", done
    assert done["agent"]["answer_verified"] is True
    assert local.call("answer", {"agent_id": kept})["text"] == "finished while cut off"
    assert_exactly_once(local.home, reachable, kept)
    states = [
        json.loads(r["data"]).get("state")
        for r in db_rows(
            local.home,
            "SELECT data FROM events WHERE agent_id = ? AND kind = 'state' ORDER BY seq",
            (kept,),
        )
    ]
    assert "unreachable" in states and "lost" not in states
    assert state(local, given_up) == "failed"  # abandoned stays abandoned here
    spoiled = local.call("wait", {"agent_id": tampered, "timeout_seconds": 90})["agent"]
    assert spoiled["state"] == "succeeded" and spoiled["answer_verified"] is False, spoiled
    with local.client() as client, pytest.raises(AnswerIntegrity):
        client.call("answer", {"agent_id": tampered})
    [event] = db_rows(
        local.home,
        "SELECT data FROM events WHERE agent_id = ? AND kind = 'integrity_failed'",
        (tampered,),
    )
    assert json.loads(event["data"])["by"] == "transfer"


def test_a_cancel_queued_while_cut_off_reaches_the_hosts_queue_when_it_is_back(
    local: DaemonProcess,
    reachable: RemoteHost,  # noqa: F811
) -> None:
    agent_id = start(local, reachable, "never")
    wait_for(lambda: state(local, agent_id) == "running", timeout=60, what="running")
    refused = local.call("abandon", {"agent_id": agent_id})
    assert not refused["abandoned"] and refused["state"] == "running"
    reachable.cut_off()
    wait_for(lambda: state(local, agent_id) == "unreachable", timeout=60, what="unreachable")
    queued = local.call("cancel", {"agent_id": agent_id})
    assert queued["accepted"]
    reachable.restore()
    done = local.call("wait", {"agent_id": agent_id, "timeout_seconds": 90})
    assert done["agent"]["state"] == "cancelled", done
    [command] = db_rows(local.home, "SELECT * FROM commands WHERE agent_id = ?", (agent_id,))
    assert command["state"] == "delivered" and "host box" in command["result"]
    remote_id = remote_agent_id(local.home, agent_id)
    [remote_command] = reachable.rows("SELECT * FROM commands WHERE agent_id = ?", (remote_id,))
    assert remote_command["kind"] == "cancel"
