"""The `codex_queue` notice transport end to end with the real Codex CLI: an orchestrating Codex
session (its own CODEX_HOME, against the mock provider) gets an agent's notice queued by
`codex queue`, and its next `codex exec resume` request to the provider carries it."""

import json
import os
import re
import subprocess

import pytest

from tests.engine_harness import node_bin
from tests.harness import short_tmpdir, wait_for
from tests.support.mock_provider import MockProvider, Text

pytestmark = pytest.mark.engines  # the real Codex CLI from node_modules

TASK_MARK = "orchestrated-task-text-5e1b"
ANSWER_MARK = "orchestrated-answer-text-90fa"


@pytest.fixture
def orchestrator():
    """(codex binary, its CODEX_HOME, env, workdir, provider): a Codex of the orchestrator's own."""
    root = short_tmpdir("arcq-")
    codex_home, work = root / "codex-home", root / "work"
    codex_home.mkdir()
    work.mkdir()
    with MockProvider() as provider:
        (codex_home / "config.toml").write_text(
            'model = "gpt-5.5"\nmodel_provider = "mock"\n[model_providers.mock]\n'
            f'name = "mock"\nbase_url = "{provider.url}/v1"\nwire_api = "responses"\n'
            'env_key = "ORCH_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
        )
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root),
            "CODEX_HOME": str(codex_home),
            "ORCH_KEY": "orchestrator-test-key",
        }
        yield node_bin() / "codex", codex_home, env, work, provider
    subprocess.run(["rm", "-rf", str(root)], check=False)


def codex_exec(codex, env, work, *args):
    result = subprocess.run(
        [str(codex), "exec", "--json", "--skip-git-repo-check", "-C", str(work), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_codex_queue_notice_reaches_the_orchestrators_next_turn(orchestrator, daemon, workdir):
    codex, codex_home, env, work, provider = orchestrator
    provider.add(Text("I will delegate and wait for the notice."))
    thread_id = re.search(r'"thread_id":"([^"]+)"', codex_exec(codex, env, work, "delegate")).group(
        1
    )
    notify = {
        "transport": "codex_queue",
        "thread_id": thread_id,
        "codex_home": str(codex_home),
        "binary": str(codex),
    }
    agent = daemon.call(
        "start",
        {
            "task": f"# {TASK_MARK}\nanswer: {ANSWER_MARK}",
            "workdir": str(workdir),
            "notify": notify,
        },
    )

    def delivered():
        status = daemon.call("delivery_status", {"agent_id": agent["id"]})
        assert status["state"] not in ("failed", "expired"), status
        return status if status["state"] == "delivered" else None

    status = wait_for(delivered, timeout=90, what="the codex_queue notice to be delivered")
    evidence = status["last_attempt"]
    assert evidence["classifier"] == "success" and evidence["exit_status"] == 0
    assert thread_id not in json.dumps(evidence), "the session id is redacted from the evidence"
    notice_id = status["notices"][0]["id"]

    before = len(provider.main_requests())
    provider.add(Text("Noted the agent's end."), Text("Continuing."))
    codex_exec(codex, env, work, "resume", thread_id, "carry on")
    carried = [r.text() for r in provider.main_requests()[before:]]
    first = carried[0]
    assert notice_id in first and agent["id"] in first, "the queued notice opens the next turn"
    assert '"state":"succeeded"' in first
    assert all(TASK_MARK not in text and ANSWER_MARK not in text for text in carried)
