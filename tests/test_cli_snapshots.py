"""Snapshots of the human output (`--format text`) of the main renderers, from real daemon
replies (demo engine), pueue-style: ids, hashes, paths and ages are masked, the rest must match
`tests/snapshots/*.txt` exactly. `AGENT_RUN_UPDATE_SNAPSHOTS=1` rewrites them.

Each text is also rendered in-process from the result model (what MCP shows) and must equal
the CLI's, which renders the same JSON through `cli_format.Record` without pydantic."""

import re
from pathlib import Path
from typing import Any

from agent_run.cli.session import cli_words
from agent_run.rpc.client import Client
from agent_run.system.home import Home
from agent_run.text.render import RENDERERS, Record, render
from agent_run.tools.table import ALL_TOOLS
from tests.batch_harness import make_repo, wait_batch
from tests.harness import DaemonProcess, check_golden, cli


def mask(text: str, paths: dict[str, str]) -> str:
    for path, name in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, name)
    text = re.sub(r"\b(ag|ex|bt|rn|cm)_[0-9a-z]{6,}\b", r"\1_ID", text)
    text = re.sub(r"(REPO_PARENT/[^\s/]+?-)[0-9a-z]{8}(-\d+)", r"\1BATCH\2", text)  # worktree names
    text = re.sub(r"\b[0-9a-f]{64}\b", "SHA256", text)
    text = re.sub(r"\b[0-9a-f]{12}\b", "SHA12", text)
    text = re.sub(r" *\b\d+[smh] ago\b", " N ago", text)  # the padding varies with the width
    text = re.sub(r"\bran \d+[smh][\dm]*", "ran N", text)  # how long a run ran
    text = re.sub(r"\bpid \d+", "pid N", text)
    text = re.sub(r"\bversion \d+\.\d+\.\d+[\w.+-]*", "version V", text)
    return re.sub(r"  events \d+", "  events N", text)


def check(name: str, text: str) -> None:
    check_golden(f"{name}.txt", text)


def cli_text(home: Home, *args: str) -> str:
    result = cli(home, "--format", "text", *args)
    assert result.returncode in (0, 2, 3), result.stderr
    return result.stdout


def same_as_the_model(client: Client, tool: str, params: dict[str, Any], text: str) -> None:
    """The CLI's text (JSON through Record) is what the model renders (MCP's text), but for
    the params a message names, which the CLI says as its flags (`confirm=true`: `--confirm`)."""
    model = client.call(tool, params)
    flags = [
        name
        for name, field in ALL_TOOLS[tool].params.model_fields.items()
        if field.annotation is bool
    ]
    assert mask(cli_words(render(model), flags) + "\n", {}) == mask(text, {})
    assert render(Record(model.model_dump(mode="json"), type(model).__name__)) == render(model)


def test_agent_renderers_match_their_snapshots(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    paths = {str(workdir): "WORKDIR", str(home.root): "HOME"}
    with Client(home.socket_path) as client:
        agent = client.call(
            "start", {"task": "answer: hello snapshot\nsteps: 2", "workdir": str(workdir)}
        )
        client.wait(agent.id, 60, 30)
        verbs = {
            "agent": ("agent", {"agent_id": agent.id}),
            "answer": ("answer", {"agent_id": agent.id}),
            "transcript": ("transcript", {"agent_id": agent.id}),
            "agents": ("list_agents", {}),
            "cancel": ("cancel", {"agent_id": agent.id}),
            "wait": ("wait", {"agent_id": agent.id}),
        }
        for verb, (tool, params) in verbs.items():
            text = cli_text(home, verb, *([agent.id] if "agent_id" in params else []))
            check(f"agent_{verb}", mask(text, paths))
            if tool not in (
                "wait",
            ):  # `wait` through the CLI is sliced; its text is the same model's
                same_as_the_model(client, tool, params, text)


def test_batch_renderers_match_their_snapshots(daemon: DaemonProcess, home: Home) -> None:
    repo = make_repo()
    paths = {str(repo.parent): "REPO_PARENT", str(home.root): "HOME"}
    with Client(home.socket_path) as client:
        batch = client.call(
            "batch_start",
            {
                "workflow": "repeated",
                "project": str(repo),
                "runs": 2,
                "runtime": "demo",
                "prompt": "write: NOTE.md = hi\nanswer: wrote it",
                "title": "Notes: pick the best",
            },
        )
        wait_batch(daemon, batch.id)
        verbs = {
            "show": ("batch", {"batch_id": batch.id}),
            "list": ("list_batches", {}),
            "review": ("batch_review", {"batch_id": batch.id}),
            "clean": ("batch_clean", {"batch_id": batch.id}),
        }
        for verb, (tool, params) in verbs.items():
            text = cli_text(home, "batch", verb, *([batch.id] if params else []))
            check(f"batch_{verb}", mask(text, paths))
            same_as_the_model(client, tool, params, text)


def test_every_renderer_is_keyed_by_a_result_model_of_the_table() -> None:
    # `transcript --follow` prints items and each turn's prompt one by one
    models = {tool.result.__name__ for tool in ALL_TOOLS.values()} | {
        "TranscriptItem",
        "TurnPrompt",
    }
    assert set(RENDERERS) <= models, set(RENDERERS) - models


WORKFLOWS = {  # each workflow's batch on the demo engine, as the batch tests run them
    "generated": {"runs": 2, "prompt": "tasks: auto"},
    "ranked": {
        "runs": 2,
        "reviewers": 1,
        "prompt": "write: feature.txt = a feature\ncommit: add the feature",
        "review_prompt": "score: 7",  # auto derives it from a commit sha: not stable
        "verify_command": "test -s feature.txt",
    },
    "validated": {
        "runs": 2,
        "prompt": "write: answer.txt = 42\nresult: auto",
        "validator_prompt": "verdict: auto",
    },
}


def test_batch_show_of_each_workflow_and_its_review_match_their_snapshots(
    daemon: DaemonProcess, home: Home
) -> None:
    repos = {workflow: make_repo() for workflow in WORKFLOWS}
    with Client(home.socket_path) as client:
        batches = {
            workflow: client.call(
                "batch_start",
                {"workflow": workflow, "project": str(repos[workflow]), "runtime": "demo", **p},
            )
            for workflow, p in WORKFLOWS.items()
        }
        for workflow, batch in batches.items():
            assert wait_batch(daemon, batch.id)["state"] == "completed", workflow
            paths = {str(repos[workflow].parent): "REPO_PARENT", str(home.root): "HOME"}
            params = {"batch_id": batch.id}
            text = cli_text(home, "batch", "show", batch.id)
            check(f"batch_show_{workflow}", mask(text, paths))
            same_as_the_model(client, "batch", params, text)
            if workflow == "ranked":  # its two candidates side by side
                one, two = (r.id for r in client.call("batch", params).runs[:2])
                text = cli_text(home, "batch", "compare", batch.id, one, two)
                check("batch_compare", mask(text, paths))
                same_as_the_model(client, "runs_compare", {**params, "run_ids": [one, two]}, text)
            if workflow == "validated":  # untracked files, previewed
                text = cli_text(home, "batch", "review", batch.id)
                check("batch_review_validated", mask(text, paths))
                same_as_the_model(client, "batch_review", params, text)


def test_doctor_text_matches_its_snapshot(daemon: DaemonProcess, home: Home) -> None:
    home.config_path.chmod(0o600)  # the permission warning depends on the umask: not here
    text = cli_text(home, "doctor")
    # Engine CLIs this machine happens to have installed (npm prefixes) are not the snapshot's.
    text = re.sub(r"^WARN daemon unconfigured .*\n(^ +\|.*\n)*", "", text, flags=re.M)
    check("doctor", mask(text, {str(home.root): "HOME"}))


def test_delivery_status_text_matches_its_snapshot(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    """An agent's delivered notice, one that failed (its error shown), one started without
    notify, and a batch's notice by `--batch-id`; notice ids and durations masked."""
    from tests.harness import wait_for

    repo = make_repo()
    delivered = {"transport": "command", "argv": ["/bin/sh", "-c", "cat >/dev/null"]}
    refused = {"transport": "command", "argv": ["/bin/sh", "-c", "exit 3"], "max_attempts": 1}
    with Client(home.socket_path) as client:
        started = {
            name: client.call("start", {"task": "answer: x", "workdir": str(workdir), **extra}).id
            for name, extra in (
                ("delivered", {"notify": delivered}),
                ("failed", {"notify": refused}),
                ("without", {}),
            )
        }
        batch = client.call(
            "batch_start",
            {
                "workflow": "repeated",
                "project": str(repo),
                "runs": 1,
                "runtime": "demo",
                "prompt": "answer: ok",
                "notify": delivered,
            },
        )
        wait_batch(daemon, batch.id)

    def settled(params: dict[str, str], state: str | None) -> bool:
        return daemon.call("delivery_status", params)["state"] == state

    for name, state in (("delivered", "delivered"), ("failed", "failed"), ("without", None)):
        params = {"agent_id": started[name]}
        wait_for(lambda p=params, s=state: settled(p, s), timeout=60, what=name)
    wait_for(lambda: settled({"batch_id": batch.id}, "delivered"), timeout=60, what="the batch")
    texts = [cli_text(home, "delivery", "status", agent_id) for agent_id in started.values()]
    texts.append(cli_text(home, "delivery", "status", "--batch-id", batch.id))
    text = re.sub(r"\bnt_[0-9a-z]{6,}\b", "nt_ID", "".join(texts))
    text = re.sub(r" in \d+\.\d\ds", " in N.NNs", text)
    check("delivery_status", mask(text, {str(home.root): "HOME"}))
    with Client(home.socket_path) as client:
        same_as_the_model(client, "delivery_status", {"batch_id": batch.id}, texts[-1])
