"""Answer integrity: answer.md tampered with on disk for real, found by `answer`, by the
daemon's scrub with no client call, and by the batch judge, and shown in every view."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.domain.errors import AnswerIntegrity
from agent_run.system.home import Home
from tests.batch_harness import make_repo, runs_of, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, cli, db_rows, make_home, remove_home, wait_for

FAST_SCRUB = TEST_CONFIG.replace("[daemon]\n", "[daemon]\nanswer_scrub_seconds = 0.5\n")


def finished(daemon: DaemonProcess, workdir: Path, task: str = "answer: the truth") -> dict:
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "succeeded" and done["answer_verified"] is True
    return done


def answer_path(home: Home, agent: dict) -> Path:
    return home.execution_dir(agent["id"], agent["execution"]["id"]) / "answer.md"


def events(home: Home, agent_id: str, kind: str) -> list[dict]:
    rows = db_rows(
        home,
        "SELECT data FROM events WHERE agent_id = ? AND kind = ? ORDER BY seq",
        (agent_id, kind),
    )
    return [json.loads(r["data"]) for r in rows]


def test_a_tampered_answer_is_recorded_and_shown_in_every_view(daemon, home, workdir):
    agent = finished(daemon, workdir)
    answer_path(home, agent).write_text("a lie")
    # The flag is stored, not recomputed: a list call re-hashes nothing.
    listed = daemon.call("list_agents", {})["items"][0]
    assert listed["answer_verified"] is True
    with pytest.raises(AnswerIntegrity), daemon.client() as client:
        client.call("answer", {"agent_id": agent["id"]})
    [event] = events(home, agent["id"], "integrity_failed")
    assert (
        event["by"] == "answer" and event["expected_sha256"] == agent["execution"]["answer_sha256"]
    )
    view = daemon.call("agent", {"agent_id": agent["id"]})
    assert view["state"] == "succeeded" and view["answer_verified"] is False
    assert view["execution"]["answer_verified"] is False
    waited = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 1})["agent"]
    assert waited["answer_verified"] is False
    assert daemon.call("list_agents", {})["items"][0]["answer_verified"] is False
    assert "NOT VERIFIED" in cli(home, "agent", agent["id"], "--format", "text").stdout
    assert "NOT VERIFIED" in cli(home, "agents", "--format", "text").stdout
    with (
        pytest.raises(AnswerIntegrity),
        daemon.client() as client,
    ):  # a second failure: no new event
        client.call("answer", {"agent_id": agent["id"]})
    assert len(events(home, agent["id"], "integrity_failed")) == 1


def test_a_restored_answer_is_verified_again(daemon, home, workdir):
    agent = finished(daemon, workdir)
    path = answer_path(home, agent)
    original = path.read_bytes()
    path.write_text("a lie")
    with pytest.raises(AnswerIntegrity), daemon.client() as client:
        client.call("answer", {"agent_id": agent["id"]})
    path.write_bytes(original)
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "the truth"
    assert daemon.call("agent", {"agent_id": agent["id"]})["answer_verified"] is True
    assert events(home, agent["id"], "integrity_restored")


def test_a_home_moved_to_another_folder_still_serves_its_verified_answers(workdir):
    """A home restored from a backup or moved by the user: the answer is found through the
    home it is in, not the absolute path stored when it was sealed."""
    home = make_home()
    daemon = DaemonProcess(home).start()
    moved = Home(home.root.parent / "moved")
    try:
        agent = finished(daemon, workdir)
        daemon.stop()
        home.root.rename(moved.root)
        daemon = DaemonProcess(moved).start()
        assert daemon.call("answer", {"agent_id": agent["id"]})["path"] == str(
            answer_path(moved, agent)
        )
        assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "the truth"
        assert daemon.call("agent", {"agent_id": agent["id"]})["answer_verified"] is True
        assert not events(moved, agent["id"], "integrity_failed")
    finally:
        daemon.stop()
        remove_home(moved)


@pytest.fixture
def scrubbing() -> Iterator[DaemonProcess]:
    home = make_home(FAST_SCRUB)
    daemon = DaemonProcess(home).start()
    yield daemon
    daemon.stop()
    remove_home(home)


def test_the_scrub_finds_a_tampered_answer_without_any_client_call(scrubbing, workdir):
    daemon, home = scrubbing, scrubbing.home
    agent = finished(daemon, workdir)
    execution = agent["execution"]["id"]

    def checked_at() -> float:
        return db_rows(home, "SELECT answer_checked_at FROM executions WHERE id = ?", (execution,))[
            0
        ][0]

    sealed_check = checked_at()
    wait_for(
        lambda: checked_at() > sealed_check, timeout=30, what="the scrub to re-check the answer"
    )
    answer_path(home, agent).write_text("a lie")
    wait_for(
        lambda: events(home, agent["id"], "integrity_failed"),
        timeout=30,
        what="the scrub to find the tampered answer",
    )
    assert events(home, agent["id"], "integrity_failed")[0]["by"] == "scrub"
    row = db_rows(home, "SELECT integrity_failed_at FROM executions WHERE id = ?", (execution,))[0]
    assert row["integrity_failed_at"] is not None
    assert daemon.call("agent", {"agent_id": agent["id"]})["answer_verified"] is False


def tamper_while_the_daemon_is_down(
    daemon: DaemonProcess, batch_id: str, stage: str, text: str
) -> dict:
    """Stop the daemon while `stage`'s agent runs, let it seal, rewrite its answer.md, restart:
    the scheduler's judge sees the tampered file first."""

    def running_agent() -> str | None:
        # Running, not only admitted: an agent admitted but not yet handed to its supervisor
        # waits for the daemon's restart (the reconciler launches it), so it would never seal.
        run = runs_of(daemon.call("batch", {"batch_id": batch_id}), stage)
        if not run or not run[0]["agent_id"]:
            return None
        agent = daemon.call("agent", {"agent_id": run[0]["agent_id"]})
        return agent["id"] if agent["state"] == "running" else None

    agent_id = wait_for(running_agent, timeout=60, what=f"the {stage}'s agent running")
    daemon.stop()

    def sealed() -> dict | None:
        rows = db_rows(
            daemon.home,
            "SELECT * FROM executions WHERE agent_id = ? AND state = 'succeeded'",
            (agent_id,),
        )
        return dict(rows[0]) if rows else None

    execution = wait_for(sealed, timeout=60, what=f"the {stage}'s agent to seal its answer")
    answer_path(daemon.home, {"id": agent_id, "execution": execution}).write_text(text)
    daemon.start()
    return execution


def test_a_generated_batch_never_uses_a_tampered_generator_answer(daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "runtime": "demo",
            "workflow": "generated",
            "project": str(repo),
            "runs": 2,
            "prompt": "tasks: auto\nsleep: 3",
        },
    )
    evil = json.dumps(
        [{"title": "evil 1", "prompt": "answer: x"}, {"title": "evil 2", "prompt": "answer: y"}]
    )
    tampered = tamper_while_the_daemon_is_down(daemon, batch["id"], "generator", evil)
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "completed", done
    generator = runs_of(done, "generator")[0]
    assert [a["kind"] for a in generator["attempts"]] == ["start", "rerun"]
    assert [w["title"] for w in runs_of(done, "worker")] == ["task 1", "task 2"]
    [event] = events(daemon.home, tampered["agent_id"], "integrity_failed")
    assert event["by"] == "batch judge"
    first = db_rows(
        daemon.home, "SELECT integrity_failed_at FROM executions WHERE id = ?", (tampered["id"],)
    )[0]
    assert first["integrity_failed_at"] is not None


def test_a_ranked_batch_never_ranks_on_a_tampered_review(daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "runtime": "demo",
            "workflow": "ranked",
            "project": str(repo),
            "runs": 1,
            "reviewers": 1,
            "prompt": "write: feature.txt = a feature\ncommit: add the feature",
            "review_prompt": "score: auto\nsleep: 3",
        },
    )
    tampered = tamper_while_the_daemon_is_down(
        daemon, batch["id"], "reviewer", "score 100, trust me"
    )
    done = wait_batch(daemon, batch["id"])
    assert done["state"] == "blocked", done
    reviewer = runs_of(done, "reviewer")[0]
    assert reviewer["state"] == "failed" and reviewer["failure"].startswith("integrity:")
    assert reviewer["answer_verified"] is False
    assert all(c["rank"] is None and c["score"] is None for c in runs_of(done, "candidate"))
    assert events(daemon.home, tampered["agent_id"], "integrity_failed")[0]["by"] == "batch judge"
