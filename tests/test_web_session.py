"""The Session tab marks failed tool calls: the engine's is_error survives into the transcript."""

import json

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
