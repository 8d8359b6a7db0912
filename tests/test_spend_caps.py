"""Spend caps with the demo engine (which reports the tokens and cost a task tells it to):
a run whose reported usage passes `max_tokens` / `max_cost_usd` is stopped and ends
`failed` / `budget_exceeded`; a cost cap cannot act on a run that reports no cost; a batch at
its cap starts no new run and says why."""

import pytest

from agent_run.domain.errors import Conflict, InvalidParams
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


# A turn of 10 model calls of 10 tokens each way (200 in all), 0.4 s apart: the caps' checks see
# each call's usage as it arrives, with time to stop the engine before the next one.
STEPPED = "steps: 10\nstep_seconds: 0.4\nstep_tokens: 10\ntokens: 0\nanswer: done"
STEP = 20  # tokens (in + out) one call reports: "one update's worth"


def said(daemon, agent_id: str) -> list[str]:
    items = daemon.call("transcript", {"agent_id": agent_id})["items"]
    return [i["content"] for i in items if i["role"] == "assistant"]


def test_a_run_is_stopped_mid_turn_as_its_usage_arrives(daemon, workdir):
    over = run(daemon, workdir, STEPPED, max_tokens=50)  # passed at the 3rd call: 60
    assert (over["state"], over["failure_kind"]) == ("failed", "budget_exceeded"), over
    assert "reported usage 60 tokens passed max_tokens 50" in over["execution"]["failure_message"]
    steps = said(daemon, over["id"])
    assert "step 3/10" in steps and "step 10/10" not in steps and "done" not in steps, steps
    assert over["execution"]["usage"]["output_tokens"] < 100  # not the whole turn's


def test_usage_is_on_the_execution_row_while_the_turn_runs(daemon, workdir):
    agent = daemon.call("start", {"task": STEPPED, "workdir": str(workdir)})

    def usage_while_running() -> bool:
        view = daemon.call("agent", {"agent_id": agent["id"]})
        usage = view["execution"]["usage"] or {}
        return view["state"] == "running" and usage.get("output_tokens", 0) >= 30

    wait_for(usage_while_running, timeout=60, what="usage reported before the turn completed")
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "succeeded" and done["execution"]["usage"]["output_tokens"] == 100


def test_an_agents_cap_counts_its_earlier_executions(daemon, workdir):
    first = run(daemon, workdir, "tokens: 100", max_tokens=300)  # 200 of 300
    assert first["state"] == "succeeded", first
    daemon.call("resume", {"agent_id": first["id"], "prompt": "tokens: 100"})
    again = daemon.call("wait", {"agent_id": first["id"], "timeout_seconds": 60})["agent"]
    assert (again["state"], again["failure_kind"]) == ("failed", "budget_exceeded"), again
    assert again["execution"]["max_tokens"] == 300  # the agent's cap, not a fresh one
    assert (
        "reported usage 400 tokens (with its agent's earlier executions) passed max_tokens 300"
        in again["execution"]["failure_message"]
    )


def test_a_batch_gives_each_new_run_what_is_left_and_at_its_cap_starts_none(daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "prompt": STEPPED,
            "runs": 3,
            "concurrency": 1,
            "max_tokens": 300,
        },
    )
    batch = wait_batch(daemon, batch["id"])
    first, second, third = batch["runs"]
    assert first["state"] == "succeeded", batch["runs"]  # 200 of 300
    agents = [daemon.call("agent", {"agent_id": r["agent_id"]}) for r in (first, second)]
    assert [a["execution"]["max_tokens"] for a in agents] == [300, 100]  # what was left
    # the second run is stopped mid-turn once past its 100: at 120, one call's worth over
    assert second["state"] == "failed" and "passed max_tokens 100" in second["failure"], second
    spent = daemon.call("usage", {"by": ["batch"], "batch_id": batch["id"]})["total"]
    assert 300 < spent["total_tokens"] <= 300 + STEP, spent
    assert third["state"] == "failed" and third["agent_id"] is None, third
    assert third["failure"] == (
        f"budget: the batch reached its max_tokens ({spent['total_tokens']} of 300 tokens reported)"
    )
    assert batch["state"] == "failed"
    assert batch["state_reason"].startswith(third["failure"]), batch["state_reason"]
    assert batch["config"]["max_tokens"] == 300 and len(batch["runs"]) == 3
    for verb, params in (
        ("run_resume", {"run_id": second["id"]}),
        ("run_followup", {"run_id": first["id"], "text": "one more"}),
    ):
        with pytest.raises(Conflict) as refused:  # no new turn at the cap either
            with daemon.client() as client:
                client.call(verb, params)
        assert "budget: the batch reached its max_tokens" in refused.value.message
    assert daemon.call("batch", {"batch_id": batch["id"]})["state"] == "failed"


def test_runs_running_together_are_stopped_once_the_batch_total_passes_its_cap(daemon):
    """Two runs at once, each given the whole 300 left when it began: alone each would spend
    200 (400 together). Each supervisor counts the other's usage as it is written, so both stop
    once the batch passes 300, within one call's worth each."""
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "prompt": STEPPED,
            "runs": 3,
            "concurrency": 2,
            "max_tokens": 300,
        },
    )
    batch = wait_batch(daemon, batch["id"])
    first, second, third = batch["runs"]
    for r in (first, second):
        assert r["state"] == "failed", batch["runs"]
        assert "the batch's reported usage" in r["failure"], r["failure"]
        assert "passed its max_tokens 300" in r["failure"], r["failure"]
    spent = daemon.call("usage", {"by": ["batch"], "batch_id": batch["id"]})["total"]
    assert 300 < spent["total_tokens"] <= 300 + 2 * STEP, spent
    assert third["state"] == "failed" and third["failure"].startswith(
        "budget: the batch reached its max_tokens"
    )


def test_a_refused_follow_up_at_the_cap_leaves_a_locked_run_locked(daemon):
    """`reopen` unlocks a validated worker for its follow-up; at the batch's cap the follow-up
    is refused, and the run stays locked (its result still feeds the verdict)."""
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "validated",
            "project": str(repo),
            "prompt": STEPPED,
            "runs": 1,
            "max_tokens": 100,
        },
    )
    batch = wait_batch(daemon, batch["id"])
    worker = next(r for r in batch["runs"] if r["stage"] == "worker")
    assert worker["state"] == "failed" and worker["locked"] is True, worker
    with pytest.raises(Conflict) as refused:
        with daemon.client() as client:
            client.call("run_followup", {"run_id": worker["id"], "text": "more", "reopen": True})
    assert "budget: the batch reached its max_tokens" in refused.value.message
    after = daemon.call("batch", {"batch_id": batch["id"]})
    assert next(r for r in after["runs"] if r["id"] == worker["id"])["locked"] is True
