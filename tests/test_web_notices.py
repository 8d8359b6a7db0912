"""Completion notices from the web forms, against a real daemon (demo engine) and real notice
programs: the Start agent and New batch forms send `start`'s / `batch_start`'s `notify`, a bad
target comes back beside its field, and the Agent page shows the notice's `delivery_status`.
Errors on fields the forms do not show come back at the top, named (never a bare 422)."""

import json
import re
import sys

from tests.batch_harness import make_repo, wait_batch
from tests.harness import wait_for


def post(web, client, path, form):
    return client.post(
        path, data={**form, "csrf": web.csrf(client)}, headers={"origin": web.origin}
    )


def recorder(path):
    """A notice program: appends the notice JSON it gets on stdin to `path`, one a line."""
    script = (
        "import sys; data = sys.stdin.read(); "
        f"open({str(path)!r}, 'a').write(data.replace(chr(10), ' ') + chr(10))"
    )
    return f"{sys.executable}\n-c\n{script}"


def notice_cell(html):
    match = re.search(r'<dd id="notice" data-state="(\w+)">(.*?)</dd>', html, re.S)
    return (match.group(1), re.sub(r"<[^>]+>", "", match.group(2))) if match else None


def test_an_agent_started_from_the_form_with_a_command_notice_shows_its_delivery(
    web, daemon, workdir, tmp_path
):
    got = tmp_path / "notices.jsonl"
    client = web.client()
    started = post(
        web,
        client,
        "/agents",
        {
            "task": "answer: notify me",
            "workdir": str(workdir),
            "notify_transport": "command",
            "notify_argv": recorder(got),
        },
    )
    assert started.status_code == 303, started.text
    agent_id = started.headers["location"].rsplit("/", 1)[1]
    daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    wait_for(
        lambda: daemon.call("delivery_status", {"agent_id": agent_id})["state"] == "delivered",
        timeout=60,
        what="the notice delivered",
    )
    notice = json.loads(got.read_text().splitlines()[0])
    assert notice["agent_id"] == agent_id, notice
    state, text = notice_cell(client.get(f"/agents/{agent_id}").text)
    assert state == "delivered" and "command:" in text and "1 attempt" in text
    assert "last: success, exit 0" in text


def test_a_failing_notice_command_shows_its_retries_and_last_error(web, daemon, workdir):
    client = web.client()
    started = post(
        web,
        client,
        "/agents",
        {
            "task": "answer: nobody listens",
            "workdir": str(workdir),
            "notify_transport": "command",
            "notify_argv": f"{sys.executable}\n-c\nimport sys; sys.exit(3)",
        },
    )
    agent_id = started.headers["location"].rsplit("/", 1)[1]
    daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": 60})
    wait_for(
        lambda: daemon.call("delivery_status", {"agent_id": agent_id})["last_error"],
        timeout=60,
        what="a first failed attempt",
    )
    state, text = notice_cell(client.get(f"/agents/{agent_id}").text)
    error = daemon.call("delivery_status", {"agent_id": agent_id})["last_error"]
    assert state in ("retry_wait", "sending", "failed"), text  # never "delivered"
    assert "exit 3" in text and error in text and "attempt" in text, (text, error)
    plain = daemon.call("start", {"task": "answer: no notice", "workdir": str(workdir)})
    assert notice_cell(client.get(f"/agents/{plain['id']}").text) is None  # none asked: none shown


def test_a_bad_notice_target_comes_back_beside_its_field_and_starts_nothing(web, daemon, workdir):
    client = web.client()
    base = {"task": "answer: x", "workdir": str(workdir)}
    empty = post(
        web, client, "/agents", {**base, "notify_transport": "command", "notify_argv": " \n"}
    )
    assert empty.status_code == 422
    assert re.search(r'id="e-notify_argv">[^<]*at least 1 item', empty.text), empty.text
    bad_thread = post(
        web,
        client,
        "/agents",
        {**base, "notify_transport": "codex_queue", "notify_thread_id": "not a thread!"},
    )
    assert bad_thread.status_code == 422 and 'id="e-notify_thread_id"' in bad_thread.text
    assert 'value="not a thread!"' in bad_thread.text  # what was typed is kept
    assert daemon.call("list_agents", {})["total"] == 0


def test_a_batch_from_the_form_notifies_for_itself_and_each_run(web, daemon, tmp_path):
    got = tmp_path / "notices.jsonl"
    client = web.client()
    started = post(
        web,
        client,
        "/batches",
        {
            "workflow": "repeated",
            "project": str(make_repo()),
            "runs": "2",
            "prompt": "answer: hi",
            "notify_transport": "command",
            "notify_argv": recorder(got),
            "notify_runs": "on",
        },
    )
    assert started.status_code == 303, started.text
    batch = wait_batch(daemon, started.headers["location"].rsplit("/", 1)[1])
    assert batch["state"] == "completed", batch["state_reason"]
    agents = {r["agent_id"] for r in batch["runs"]}
    for agent_id in agents:
        wait_for(
            lambda a=agent_id: (
                daemon.call("delivery_status", {"agent_id": a})["state"] == "delivered"
            ),
            timeout=60,
            what="each run's notice",
        )
    wait_for(
        lambda: got.exists() and len(got.read_text().splitlines()) == 3,
        timeout=60,
        what="two run notices and the batch's",
    )
    notices = [json.loads(line) for line in got.read_text().splitlines()]
    assert {n.get("agent_id") for n in notices} >= agents
    assert any(n.get("batch_id") == batch["id"] and not n.get("agent_id") for n in notices), notices
    page = client.get(f"/agents/{next(iter(agents))}").text
    assert notice_cell(page)[0] == "delivered"


def test_errors_on_fields_the_forms_do_not_show_come_back_at_the_top_named(web, daemon, workdir):
    client = web.client()
    too_long = "r" * 300
    agent = post(
        web,
        client,
        "/agents",
        {"task": "answer: x", "workdir": str(workdir), "request_id": too_long},
    )
    assert agent.status_code == 422
    assert re.search(r'id="e-_" role="alert">request_id: [^<]*at most 200', agent.text), agent.text
    form = {"workflow": "repeated", "project": str(make_repo()), "runs": "1", "prompt": "x"}
    batch = post(web, client, "/batches", {**form, "request_id": too_long})
    assert batch.status_code == 422
    assert re.search(r'id="e-_" role="alert">request_id: [^<]*at most 200', batch.text), batch.text
    profile = post(web, client, "/batches", {**form, "profile": "everything"})
    assert profile.status_code == 422
    assert re.search(r'id="e-profile">[^<]*read_only', profile.text), profile.text  # by its select
    assert 'id="e-_"' not in profile.text
    assert daemon.call("list_batches", {})["total"] == 0
    assert daemon.call("list_agents", {})["total"] == 0
