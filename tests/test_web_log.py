"""The `events` tool (an agent's event log) on every transport, and the Log tab built on it."""

import re

from tests.batch_harness import make_repo, wait_batch
from tests.harness import wait_for


def _done(daemon, agent_id):
    wait_for(
        lambda: daemon.call("agent", {"agent_id": agent_id})["state"] == "succeeded",
        what="agent done",
    )


def test_events_pages_filters_and_matches_the_socket_over_http(web, daemon, workdir):
    client = web.client(headers={"authorization": f"Bearer {web.token}"})
    agent = client.post(
        "/api/tools/start",
        json={"task": "steps: 2\nstep_seconds: 0.05\nanswer: logged", "workdir": str(workdir)},
    ).json()
    _done(daemon, agent["id"])
    everything = client.post("/api/tools/events", json={"agent_id": agent["id"]}).json()
    assert everything == daemon.call("events", {"agent_id": agent["id"]})
    items = everything["items"]
    assert [e["agent_seq"] for e in items] == list(range(1, len(items) + 1))
    assert [e["seq"] for e in items] == sorted(e["seq"] for e in items)
    states = [e["data"].get("state") for e in items if e["kind"] == "state"]
    assert states and states[-1] == "succeeded"
    assert everything["next_after"] == items[-1]["seq"]
    # Paging by after_seq reads the same events one at a time.
    paged, after = [], 0
    while True:
        page = client.post(
            "/api/tools/events", json={"agent_id": agent["id"], "after_seq": after, "limit": 1}
        ).json()
        if not page["items"]:
            assert page["next_after"] == after
            break
        paged += page["items"]
        after = page["next_after"]
    assert paged == items
    only = client.post(
        "/api/tools/events", json={"agent_id": agent["id"], "kinds": ["state"]}
    ).json()
    assert only["items"] == [e for e in items if e["kind"] == "state"]
    none = client.post(
        "/api/tools/events", json={"agent_id": agent["id"], "kinds": ["no_such_kind"]}
    ).json()
    assert none["items"] == []


def test_events_refuses_bad_params_naming_the_field(web, daemon, workdir):
    client = web.client(headers={"authorization": f"Bearer {web.token}"})
    cases = (
        (({"agent_id": "ag_x", "limit": 0}), "limit"),
        ({"agent_id": "ag_x", "limit": 1001}, "limit"),
        ({"agent_id": "ag_x", "limit": "5"}, "limit"),
        ({"agent_id": "ag_x", "after_seq": 2**63}, "after_seq"),
        ({"agent_id": "ag_x", "after_seq": -1}, "after_seq"),
        ({"agent_id": "ag_x", "kinds": "state"}, "kinds"),
        ({"agent_id": "ag_x", "kinds": ["s"] * 33}, "kinds"),
        ({"agent_id": "nope"}, "agent_id"),
        ({"agent_id": "ag_x", "bogus": 1}, "bogus"),
    )
    for params, field in cases:
        response = client.post("/api/tools/events", json=params)
        assert response.status_code == 422, (params, response.text)
        error = response.json()["error"]
        assert error["code"] == "InvalidParams" and error["field"].startswith(field), (
            params,
            error,
        )
    missing = client.post("/api/tools/events", json={"agent_id": "ag_missing"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "AgentNotFound"


def _rows(html):
    return re.findall(r'<tr class="event event-([a-z_]+)">', html)


def test_agent_log_tab_lists_events_and_filters_by_kind(web, daemon, workdir):
    client = web.client()
    agent = daemon.call(
        "start", {"task": "answer: <script>alert(1)</script>", "workdir": str(workdir)}
    )
    _done(daemon, agent["id"])
    kinds = [e["kind"] for e in daemon.call("events", {"agent_id": agent["id"]})["items"]]
    html = client.get(f"/agents/{agent['id']}?tab=log").text
    assert _rows(html) == kinds
    assert 'aria-current="page">Log<' in html and "<script>alert" not in html
    filtered = client.get(f"/agents/{agent['id']}?tab=log&kind=state").text
    assert _rows(filtered) == [k for k in kinds if k == "state"] and len(set(kinds)) > 1
    assert 'class="chip current" href="?tab=log&amp;kind=state"' in filtered
    assert _rows(client.get(f"/agents/{agent['id']}").text) == []  # the session tab by default


def test_run_log_tab_shows_the_attempts_agent_events(web, daemon):
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": 1,
            "runtime": "demo",
            "prompt": "steps: 1\nanswer: ran",
        },
    )
    batch = wait_batch(daemon, batch["id"])
    run = batch["runs"][0]
    kinds = [e["kind"] for e in daemon.call("events", {"agent_id": run["agent_id"]})["items"]]
    html = web.client().get(f"/batches/{batch['id']}/runs/{run['id']}?tab=log&kind=state").text
    assert _rows(html) == [k for k in kinds if k == "state"] and _rows(html)
    assert 'aria-current="page">Log<' in html


def test_events_over_the_cli_verb_is_the_sockets_page(daemon, workdir):
    from tests.harness import cli_json

    agent = daemon.call("start", {"task": "answer: on the cli", "workdir": str(workdir)})
    _done(daemon, agent["id"])
    expected = daemon.call(
        "events", {"agent_id": agent["id"], "kinds": ["state", "session"], "limit": 3}
    )
    got = cli_json(
        daemon.home, "events", agent["id"], "--kinds", "state", "--kinds", "session", "--limit", "3"
    )
    assert got == expected and len(got["items"]) == 3
    assert {e["kind"] for e in got["items"]} <= {"state", "session"}
