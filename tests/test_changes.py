"""The `changes` tool: agents and batches changed after a revision, as a long-poll, on the socket."""

import threading
import time

from tests.batch_harness import make_repo, wait_batch
from tests.harness import wait_for


def test_changes_lists_agents_changed_after_a_revision_and_nothing_else(daemon, workdir):
    first = daemon.call("start", {"task": "answer: one", "workdir": str(workdir)})
    wait_for(
        lambda: daemon.call("agent", {"agent_id": first["id"]})["state"] == "succeeded",
        what="first done",
    )
    revision = daemon.call("changes", {"after_revision": 0})["revision"]
    second = daemon.call("start", {"task": "answer: two", "workdir": str(workdir)})
    result = daemon.call("changes", {"after_revision": revision})
    assert result["agents"] == [second["id"]]
    assert result["batches"] == []
    assert result["revision"] > revision
    everything = daemon.call("changes", {"after_revision": 0})
    assert set(everything["agents"]) == {first["id"], second["id"]}


def test_changes_long_poll_wakes_on_a_change_and_times_out_empty(daemon, workdir):
    revision = daemon.call("changes", {"after_revision": 0})["revision"]
    started = time.monotonic()
    idle = daemon.call("changes", {"after_revision": revision, "wait_seconds": 0.5})
    assert time.monotonic() - started >= 0.45
    assert (idle["agents"], idle["batches"], idle["revision"]) == ([], [], revision)
    results = []
    poll = threading.Thread(
        target=lambda: results.append(
            daemon.call("changes", {"after_revision": revision, "wait_seconds": 30})
        )
    )
    poll.start()
    agent = daemon.call("start", {"task": "answer: wake", "workdir": str(workdir)})
    poll.join(timeout=60)
    assert results and agent["id"] in results[0]["agents"]


def test_changes_names_a_batch_and_its_agents(daemon):
    repo = make_repo()
    revision = daemon.call("changes", {"after_revision": 0})["revision"]
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": 2,
            "prompt": "answer: hi",
            "runtime": "demo",
        },
    )
    batch = wait_batch(daemon, batch["id"])
    result = daemon.call("changes", {"after_revision": revision})
    assert result["batches"] == [batch["id"]]
    assert {r["agent_id"] for r in batch["runs"]} <= set(result["agents"])
    limited = daemon.call("changes", {"after_revision": revision, "limit": 1})
    assert limited["truncated"] and len(limited["agents"]) == 1
