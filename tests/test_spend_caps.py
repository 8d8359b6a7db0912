"""Spend caps with the demo engine (which reports the tokens and cost a task tells it to):
a run whose reported usage passes `max_tokens` / `max_cost_usd` is stopped and ends
`failed` / `budget_exceeded`; a cost cap cannot act on a run that reports no cost; a batch at
its cap starts no new run and says why."""

import pytest

from agent_run.domain.errors import InvalidParams
from tests.batch_harness import make_repo, wait_batch
from tests.harness import wait_for


def run(daemon, workdir, task: str, **caps) -> dict:
    agent = daemon.call("start", {"task": task, "workdir": str(workdir), **caps})
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    assert not result["timed_out"]
    return result["agent"]


def test_a_run_past_max_tokens_ends_budget_exceeded_and_one_within_succeeds(daemon, workdir):
    over = run(daemon, workdir, "tokens: 100", max_tokens=150)  # reports 100 in + 100 out
    assert (over["state"], over["failure_kind"]) == ("failed", "budget_exceeded"), over
    assert "200 tokens passed max_tokens 150" in over["execution"]["failure_message"]
    assert (
        over["execution"]["max_tokens"] == 150
        and over["execution"]["usage"]["output_tokens"] == 100
    )
    assert "max_tokens" in over["execution"]["failure_advice"]
    within = run(daemon, workdir, "tokens: 100", max_tokens=200)
    assert within["state"] == "succeeded", within


def test_a_cost_cap_stops_a_run_that_reports_more_and_cannot_act_without_a_reported_cost(
    daemon, workdir
):
    over = run(daemon, workdir, "cost: 0.5", max_cost_usd=0.25)
    assert (over["state"], over["failure_kind"]) == ("failed", "budget_exceeded"), over
    assert "passed max_cost_usd $0.2500" in over["execution"]["failure_message"]
    unreported = run(daemon, workdir, "cost: none", max_cost_usd=0.25)
    assert unreported["state"] == "succeeded" and unreported["execution"]["cost_usd"] is None


def test_the_cap_stops_the_engine_before_its_queued_turns_run(daemon, workdir):
    agent = daemon.call(
        "start",
        {
            "task": "tokens: 100\nsteps: 30\nstep_seconds: 0.1\nanswer: first",
            "workdir": str(workdir),
            "max_tokens": 300,
        },
    )
    wait_for(lambda: daemon.call("agent", {"agent_id": agent["id"]})["state"] == "running")
    for text in ("tokens: 100\nanswer: second", "sleep: 120\nanswer: third"):
        assert daemon.call("steer", {"agent_id": agent["id"], "text": text})["state"] == "delivered"
    view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
    assert not view["timed_out"], "the third turn (120 s) was never waited for"
    assert (view["agent"]["state"], view["agent"]["failure_kind"]) == ("failed", "budget_exceeded")
    assert "400 tokens passed max_tokens 300" in view["agent"]["execution"]["failure_message"]
    said = [
        i["content"]
        for i in daemon.call("transcript", {"agent_id": agent["id"]})["items"]
        if i["role"] == "assistant"
    ]
    assert "second" in said and "third" not in said


def test_caps_are_validated_naming_the_field(daemon, workdir):
    for params, field in (
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_cost_usd": -1.0}, "max_cost_usd"),
        ({"max_tokens": True}, "max_tokens"),
    ):
        with pytest.raises(InvalidParams) as caught:
            with daemon.client() as client:
                client.call("start", {"task": "x", "workdir": str(workdir), **params})
        assert caught.value.field == field


def test_a_batch_at_its_cap_starts_no_new_run_and_says_why(daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "prompt": "tokens: 100",
            "runs": 3,
            "concurrency": 1,
            "max_tokens": 300,
        },
    )
    batch = wait_batch(daemon, batch["id"])
    states = [(r["state"], r["failure"]) for r in batch["runs"]]
    assert [s for s, _ in states].count("succeeded") == 2, states
    stopped = [f for s, f in states if s == "failed"]
    assert stopped == ["budget: the batch reached its max_tokens (400 of 300 tokens reported)"], (
        states
    )
    assert batch["config"]["max_tokens"] == 300 and len(batch["runs"]) == 3
    assert batch["state"] == "failed"
    agents = [
        daemon.call("agent", {"agent_id": r["agent_id"]}) for r in batch["runs"] if r["agent_id"]
    ]
    assert len(agents) == 2 and all(a["execution"]["max_tokens"] == 300 for a in agents)
    usage = daemon.call("usage", {"by": ["batch"], "batch_id": batch["id"]})
    assert usage["total"]["total_tokens"] == 400
