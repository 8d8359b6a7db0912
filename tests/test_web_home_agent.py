"""Home's project filter and the standalone Agent page's cancel and steer, through
`agent-run web` posts against a real daemon (demo engine)."""

import re

from tests.batch_harness import make_repo, wait_batch
from tests.harness import wait_for


def post(web, client, path, form=None):
    return client.post(
        path, data={**(form or {}), "csrf": web.csrf(client)}, headers={"origin": web.origin}
    )


def test_home_filters_batches_by_project(web, daemon):
    repos = [make_repo(), make_repo()]
    ids = []
    for repo in repos:
        started = daemon.call(
            "batch_start",
            {"workflow": "repeated", "project": str(repo), "runs": 1, "prompt": "answer: hi"},
        )
        ids.append(started["id"])
    for batch_id in ids:
        assert wait_batch(daemon, batch_id)["state"] == "completed"
    client = web.client()
    both = client.get("/").text
    assert ids[0] in both and ids[1] in both
    first_only = client.get("/", params={"project": str(repos[0])}).text
    assert ids[0] in first_only and ids[1] not in first_only


def test_cancel_from_the_agent_page_cancels_the_running_agent(web, daemon, workdir):
    client = web.client()
    started = post(
        web,
        client,
        "/agents",
        {"task": "steps: 1000\nstep_seconds: 0.05", "workdir": str(workdir)},
    )
    assert started.status_code == 303, started.text
    agent_id = started.headers["location"].rsplit("/", 1)[1]
    wait_for(
        lambda: daemon.call("agent", {"agent_id": agent_id})["state"] == "running",
        what="the agent to run",
    )
    assert 'action="/agents/' + agent_id + '/cancel"' in client.get(f"/agents/{agent_id}").text
    cancelled = post(web, client, f"/agents/{agent_id}/cancel")
    assert cancelled.status_code == 303
    assert cancelled.headers["location"] == f"/agents/{agent_id}"
    result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    assert result["agent"]["state"] == "cancelled", result


def test_steer_from_the_agent_page_becomes_the_answer(web, daemon, workdir):
    client = web.client()
    started = post(
        web,
        client,
        "/agents",
        {"task": "steps: 30\nstep_seconds: 0.1\nanswer: first turn", "workdir": str(workdir)},
    )
    agent_id = started.headers["location"].rsplit("/", 1)[1]
    wait_for(
        lambda: daemon.call("agent", {"agent_id": agent_id})["state"] == "running",
        what="the agent to run",
    )
    steered = post(web, client, f"/agents/{agent_id}/steer", {"text": "answer: steered turn"})
    assert steered.status_code == 303, steered.text
    result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    assert result["agent"]["state"] == "succeeded", result
    assert daemon.call("answer", {"agent_id": agent_id})["text"] == "steered turn"
    assert "steered turn" in client.get(f"/agents/{agent_id}").text


def test_home_keeps_standalone_and_blocked_agents_behind_a_hundred_newer_batch_agents(
    web, daemon, workdir
):
    alone = daemon.call("start", {"task": "answer: on my own", "workdir": str(workdir)})
    blocked = daemon.call(
        "start",
        {"task": "finish: need a key\nfinish_status: blocked\nanswer: x", "workdir": str(workdir)},
    )
    # 101 newer agents admitted as batch runs' agents are (the scheduler's request id): the
    # newest 100 agents are all theirs, as during a 100-agent batch.
    newer = [
        daemon.call(
            "start",
            {"task": "answer: run", "workdir": str(workdir), "request_id": f"rn_home{n}-a1"},
        )
        for n in range(101)
    ]
    for agent in [alone, blocked, *newer]:
        daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 120})
    newest = daemon.call("list_agents", {"limit": 100})["items"]
    assert alone["id"] not in {a["id"] for a in newest}
    html = web.client().get("/").text
    needs_you = html[html.index("Needs you") : html.index("<h2>Batches")]
    assert blocked["id"] in needs_you and alone["id"] not in needs_you
    agents = html[html.index("<h2>Agents") :]
    assert alone["id"] in agents and blocked["id"] in agents
    assert not any(a["id"] in agents for a in newer)


def test_home_pages_through_older_batches_and_keeps_a_blocked_one_under_needs_you(web, daemon):
    repo = make_repo()
    blocked = daemon.call(
        "batch_start",
        {
            "workflow": "ranked",
            "project": str(repo),
            "runs": 1,
            "reviewers": 1,
            "prompt": "require: NOPE\nanswer: no",
            "review_prompt": "score: auto",
        },
    )
    assert wait_batch(daemon, blocked["id"])["state"] == "blocked"
    ids = [blocked["id"]]
    for _ in range(2):
        started = daemon.call(
            "batch_start",
            {"workflow": "repeated", "project": str(repo), "runs": 1, "prompt": "answer: hi"},
        )
        assert wait_batch(daemon, started["id"])["state"] == "completed"
        ids.append(started["id"])
    client = web.client()
    first = client.get("/", params={"limit": 2}).text
    table = first[first.index("<h2>Batches") :]
    assert ids[2] in table and ids[1] in table and ids[0] not in table
    assert "Batches 1–2 of 3" in first and 'rel="prev"' not in first
    needs_you = first[first.index("Needs you") : first.index("<h2>Batches")]
    assert ids[0] in needs_you  # blocked on an older page: still there
    older = re.search(r'href="(/\?offset=2&amp;limit=2)" rel="next"', first).group(1)
    second = client.get(older.replace("&amp;", "&")).text
    table = second[second.index("<h2>Batches") :]
    assert ids[0] in table and ids[1] not in table and "Batches 3–3 of 3" in second
    assert 'rel="next"' not in second and 'href="/?offset=0&amp;limit=2" rel="prev"' in second
    # The project filter is the daemon's, over every batch, not just the page's.
    other = make_repo()
    elsewhere = daemon.call(
        "batch_start",
        {"workflow": "repeated", "project": str(other), "runs": 1, "prompt": "answer: hi"},
    )
    wait_batch(daemon, elsewhere["id"])
    mine = client.get("/", params={"project": str(repo), "limit": 2, "offset": 2}).text
    table = mine[mine.index("<h2>Batches") :]
    assert ids[0] in table and elsewhere["id"] not in table and "of 3" in table
