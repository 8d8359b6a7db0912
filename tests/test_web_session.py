"""The Session tab marks failed tool calls: the engine's is_error survives into the transcript."""

import json
import re

from agent_run.engines.stream_json import events_of
from tests.harness import wait_for


def _settled(daemon, agent_id):
    wait_for(
        lambda: daemon.call("agent", {"agent_id": agent_id})["state"] == "succeeded",
        what="agent done",
    )


def test_a_refused_tool_call_is_failed_in_the_transcript_and_marked_on_the_page(
    web, daemon, workdir
):
    refused = daemon.call(
        "start",
        {
            "task": "write: out.txt = no\nanswer: tried",
            "workdir": str(workdir),
            "profile": "read_only",
        },
    )
    allowed = daemon.call(
        "start", {"task": "write: ok.txt = yes\nanswer: wrote", "workdir": str(workdir)}
    )
    for agent in (refused, allowed):
        _settled(daemon, agent["id"])

    def results(agent_id):
        return [
            i
            for i in daemon.call("transcript", {"agent_id": agent_id})["items"]
            if i["role"] == "tool"
        ]

    assert [i["is_error"] for i in results(refused["id"])] == [True]
    assert [i["is_error"] for i in results(allowed["id"])] == [False]
    client = web.client()
    bad = client.get(f"/agents/{refused['id']}").text
    assert bad.count('tool-failed"') == 1 and "1 failed</span>" in bad
    good = client.get(f"/agents/{allowed['id']}").text
    assert "tool-failed" not in good and "failed</span>" not in good


def test_stream_json_keeps_a_tool_results_is_error():
    line = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": True,
                    "content": "denied",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "fine"}],
                },
            ],
        },
    }
    assert [(e.content, e.is_error) for e in events_of(line)] == [("denied", True), ("fine", False)]


def test_codex_marks_a_failed_command_patch_or_mcp_call():
    from agent_run.engines.codex import CodexEngine

    def completed(item):
        line = json.dumps({"method": "item/completed", "params": {"item": item}})
        return [(e.content.splitlines()[-1], e.is_error) for e in CodexEngine().parse_line(line)]

    assert completed(
        {
            "type": "commandExecution",
            "id": "c1",
            "aggregatedOutput": "ok",
            "exitCode": 0,
            "status": "completed",
        }
    ) == [("[exit 0]", False)]
    assert completed(
        {
            "type": "commandExecution",
            "id": "c2",
            "aggregatedOutput": "no",
            "exitCode": 2,
            "status": "failed",
        }
    ) == [("[exit 2]", True)]
    assert completed(
        {"type": "commandExecution", "id": "c3", "exitCode": None, "status": "declined"}
    ) == [("[exit None]", True)]
    assert completed({"type": "fileChange", "id": "p1", "status": "failed"}) == [("failed", True)]
    assert completed({"type": "fileChange", "id": "p2", "status": "completed"}) == [
        ("completed", False)
    ]
    assert (
        completed({"type": "mcpToolCall", "id": "m1", "error": {"message": "boom"}})[0][1] is True
    )
    assert completed(
        {"type": "mcpToolCall", "id": "m2", "result": {"content": [{"type": "text", "text": "hi"}]}}
    ) == [("hi", False)]


TURN_PROMPT = re.compile(r'<details class="turn-prompt" data-turn="(\d+)"')


def test_each_turn_opens_with_its_prompt_escaped_on_the_page_and_in_the_follow(
    web, daemon, workdir
):
    task = "steps: 2\nstep_seconds: 0.05\nanswer: one"
    agent = daemon.call("start", {"task": task, "workdir": str(workdir)})
    _settled(daemon, agent["id"])
    client = web.client()
    page = client.get(f"/agents/{agent['id']}").text
    assert TURN_PROMPT.findall(page) == ["1"] and "answer: one" in page
    cursor = max(int(i) for i in re.findall(r'data-item="(\d+)"', page))
    probe = "answer: two <script>alert('prompt')</script>"
    daemon.call("resume", {"agent_id": agent["id"], "prompt": probe})
    _settled(daemon, agent["id"])

    def follow(after, turn):
        response = client.get(
            f"/agents/{agent['id']}/transcript", params={"after": after, "turn": turn}
        )
        assert response.status_code == 200, response.text
        return response.json()["html"]

    html_ = follow(cursor, 1)
    assert TURN_PROMPT.findall(html_) == ["2"] and html_.count('class="turn"') == 1
    escaped = "answer: two &lt;script&gt;alert('prompt')&lt;/script&gt;"
    assert escaped in html_ and "<script>" not in html_
    assert html_.index("turn-prompt") < html_.index("data-item=")  # the prompt opens the turn
    page = client.get(f"/agents/{agent['id']}").text
    assert TURN_PROMPT.findall(page) == ["1", "2"] and escaped in page
    # A turn with no message yet shows its prompt at once; its messages then follow it without
    # a second divider.
    end = max(int(i) for i in re.findall(r'data-item="(\d+)"', page))
    daemon.call("resume", {"agent_id": agent["id"], "prompt": "sleep: 1\nanswer: three"})
    early = follow(end, 2)
    assert TURN_PROMPT.findall(early) == ["3"] and "sleep: 1" in early
    _settled(daemon, agent["id"])
    rest = follow(end, 3)
    assert 'class="turn"' not in rest and "three" in rest and 'data-item="' in rest
