"""The stdlib worker-tools server at the wire: real stdio, hostile input, typed JSON-RPC answers."""

import json
import os
import subprocess
import sys

from agent_run.worker_tools.catalog import SUBMIT_RESULT_SCHEMA, SUBMIT_SCORE_SCHEMA
from agent_run.worker_tools.validation import InvalidArgument, validate
from tests.harness import db_rows, wait_for


def _converse(
    home, execution_id: str, token: str, lines: list[bytes], tools: str = "finish"
) -> list[dict]:
    env = {
        "AGENT_RUN_HOME": str(home.root),
        "AGENT_RUN_EXECUTION_ID": execution_id,
        "AGENT_RUN_WORKER_TOKEN": token,
        "AGENT_RUN_WORKER_TOOLS": tools,
        "PATH": os.environ["PATH"],
    }
    out = subprocess.run(
        [sys.executable, "-m", "agent_run.worker_tools"],
        input=b"".join(lines),
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def _request(msg_id, method, params=None) -> bytes:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode() + b"\n"


def test_hostile_input_gets_typed_answers_and_records_nothing(daemon, home, workdir):
    agent = daemon.call(
        "start", {"task": "steps: 100\nstep_seconds: 0.05\nanswer: real", "workdir": str(workdir)}
    )
    row = wait_for(
        lambda: next(
            iter(
                db_rows(
                    home,
                    "SELECT * FROM executions WHERE agent_id = ? AND worker_token_sha256 IS NOT NULL",
                    (agent["id"],),
                )
            ),
            None,
        )
    )
    answers = _converse(
        home,
        row["id"],
        "not-the-token",
        [
            b"{not json\n",
            b"\xff\xfe\n",
            b"[1, 2]\n",
            b'"a string"\n',
            b"[" * 200_000 + b"\n",
            _request(1, "initialize", {"protocolVersion": "1999-01-01", "capabilities": {}}),
            _request(2, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}),
            b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n',
            _request(3, "resources/list"),
            _request(4, "tools/list"),
            _request(5, "tools/call", {"name": "finish"}),
            _request(
                6,
                "tools/call",
                {"name": "finish", "arguments": {"summary": "x", "status": "maybe"}},
            ),
            _request(
                7,
                "tools/call",
                {"name": "create_commit", "arguments": {"message": "m", "files": ["a"]}},
            ),
            _request(8, "tools/call", {"arguments": {}}),
            _request(9, "tools/call", {"name": "finish", "arguments": "summary"}),
            _request(
                10,
                "tools/call",
                {"name": "finish", "arguments": {"summary": "forged", "status": "done"}},
            ),
            _request(11, "ping"),
            b'{"jsonrpc": "2.0", "id": 12, "method": 7}\n',
            _request(13, "tools/list", ["positional"]),
        ],
    )
    [batch] = [a for a in answers if isinstance(a, list)]
    assert [a["error"]["code"] for a in batch] == [-32600, -32600], (
        "a batch gets a batch of answers"
    )
    answers = [a for a in answers if not isinstance(a, list)]
    by_id = {a["id"]: a for a in answers if a.get("id") is not None}
    anonymous = [a["error"]["code"] for a in answers if a.get("id") is None]
    assert anonymous == [-32700, -32700, -32600, -32700], answers
    assert by_id[1]["result"]["protocolVersion"] == "2025-11-25"
    assert by_id[2]["result"]["protocolVersion"] == "2025-06-18"
    assert by_id[2]["result"]["serverInfo"]["name"] == "agent_run_worker"
    assert by_id[3]["error"]["code"] == -32601
    [tool] = by_id[4]["result"]["tools"]
    assert tool["name"] == "finish" and tool["inputSchema"]["required"] == ["summary", "status"]
    assert tool["annotations"]["readOnlyHint"] is False

    def text(msg_id):
        result = by_id[msg_id]["result"]
        assert result["isError"] is True, result
        return result["content"][0]["text"]

    assert text(5) == "invalid summary: Field required"
    assert text(6) == "invalid status: Input should be 'done', 'blocked' or 'failed'"
    assert text(7) == "no worker tool 'create_commit'", "only offered tools may be called"
    assert by_id[8]["error"]["code"] == -32602 and by_id[8]["error"]["data"] == {"field": "name"}
    assert by_id[9]["error"]["code"] == -32602 and by_id[9]["error"]["data"] == {
        "field": "arguments"
    }
    assert "not bound" in text(10)
    assert by_id[11]["result"] == {}
    assert by_id[12]["error"]["code"] == -32600
    assert by_id[13]["error"]["code"] == -32602
    assert len(answers) == 17, "notifications get no answer"
    daemon.call("cancel", {"agent_id": agent["id"]})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 30})
    assert db_rows(home, "SELECT count(*) AS n FROM tool_reports")[0]["n"] == 0


def test_validation_coerces_like_before_and_names_the_nested_field():
    assert validate(SUBMIT_SCORE_SCHEMA, {"score": "85", "reason": "ok"}) == {
        "score": 85.0,
        "reason": "ok",
    }
    assert validate(SUBMIT_SCORE_SCHEMA, {"score": 70, "reason": "ok"})["score"] == 70.0
    for args, expected in [
        ({"score": 101, "reason": "r"}, "invalid score: Input should be less than or equal to 100"),
        (
            {"score": "x", "reason": "r"},
            "invalid score: Input should be a valid number, unable to parse string as a number",
        ),
        (
            {"score": "nan", "reason": "r"},
            "invalid score: Input should be greater than or equal to 0",
        ),
        (
            {"score": 10**400, "reason": "r"},
            "invalid score: Input should be less than or equal to 100",
        ),
        ({"score": 1, "reason": "r", "extra": 1}, "invalid extra: Extra inputs are not permitted"),
    ]:
        try:
            validate(SUBMIT_SCORE_SCHEMA, args)
        except InvalidArgument as exc:
            assert str(exc) == expected
        else:
            raise AssertionError(f"{args} was accepted")
    for args, expected in [
        ({"files": []}, "invalid files: List should have at least 1 item after validation, not 0"),
        ({"files": [{"path": "a"}]}, "invalid files.0.explanation: Field required"),
        (
            {"files": [3]},
            "invalid files.0: Input should be a valid dictionary or instance of ResultFile",
        ),
    ]:
        try:
            validate(SUBMIT_RESULT_SCHEMA, args)
        except InvalidArgument as exc:
            assert str(exc) == expected
        else:
            raise AssertionError(f"{args} was accepted")


def test_lone_surrogates_in_a_finish_are_stored_as_replacement_characters(daemon, home, workdir):
    """An engine passes on a provider's text with a lone surrogate escaped in its JSON: the
    worker tool records its summary with U+FFFD in its place, not an internal error."""
    agent = daemon.call(
        "start", {"task": "steps: 400\nstep_seconds: 0.05\nanswer: real", "workdir": str(workdir)}
    )
    config = wait_for(lambda: next(iter(home.root.rglob("mcp.json")), None))
    [server] = json.loads(config.read_text())["mcpServers"].values()
    line = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "finish",'
        b' "arguments": {"summary": "cut \\ud800 here \\ud83d\\ude00", "status": "done"}}}\n'
    )
    relay = subprocess.run(  # what the engine starts: the relay to its supervisor's gate
        [server["command"], *server["args"]], input=line, capture_output=True, timeout=60
    )
    [answer] = [json.loads(out) for out in relay.stdout.splitlines()]
    assert answer["result"]["isError"] is False, answer
    [report] = db_rows(home, "SELECT payload FROM tool_reports")
    assert json.loads(report["payload"])["summary"] == "cut \ufffd here \U0001f600"
    daemon.call("cancel", {"agent_id": agent["id"]})
    daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 30})
