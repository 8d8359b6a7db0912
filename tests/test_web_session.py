"""The Session tab marks failed tool calls: the engine's is_error survives into the transcript."""

from agent_run.engines.stream_json import events_of
from tests.harness import wait_for


def _settled(daemon, agent_id):
    wait_for(lambda: daemon.call("agent", {"agent_id": agent_id})["state"] == "succeeded", what="agent done")


def test_a_refused_tool_call_is_failed_in_the_transcript_and_marked_on_the_page(web, daemon, workdir):
    refused = daemon.call("start", {"task": "write: out.txt = no\nanswer: tried", "workdir": str(workdir),
                                    "profile": "read_only"})
    allowed = daemon.call("start", {"task": "write: ok.txt = yes\nanswer: wrote", "workdir": str(workdir)})
    for agent in (refused, allowed):
        _settled(daemon, agent["id"])

    def results(agent_id):
        return [i for i in daemon.call("transcript", {"agent_id": agent_id})["items"] if i["role"] == "tool"]

    assert [i["is_error"] for i in results(refused["id"])] == [True]
    assert [i["is_error"] for i in results(allowed["id"])] == [False]
    client = web.client()
    bad = client.get(f"/agents/{refused['id']}").text
    assert bad.count('tool-failed"') == 1 and "1 failed</span>" in bad
    good = client.get(f"/agents/{allowed['id']}").text
    assert "tool-failed" not in good and "failed</span>" not in good


def test_stream_json_keeps_a_tool_results_is_error():
    line = {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": "denied"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "fine"}]}]}}
    assert [(e.content, e.is_error) for e in events_of(line)] == [("denied", True), ("fine", False)]
