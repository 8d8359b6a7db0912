"""Snapshots of the human output (`--format text`) of the main renderers, from real daemon
replies (demo engine), pueue-style: ids, hashes, paths and ages are masked, the rest must match
`tests/snapshots/*.txt` exactly. `AGENT_RUN_UPDATE_SNAPSHOTS=1` rewrites them.

Each text is also rendered in-process from the result model (what MCP shows) and must equal
the CLI's, which renders the same JSON through `cli_format.Record` without pydantic."""

import os
import re
from pathlib import Path
from typing import Any

from agent_run.cli_format import RENDERERS, Record, render
from agent_run.home import Home
from agent_run.rpc.client import Client
from agent_run.tools import ALL_TOOLS
from tests.batch_harness import make_repo, wait_batch
from tests.harness import DaemonProcess, cli

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("AGENT_RUN_UPDATE_SNAPSHOTS") == "1"


def mask(text: str, paths: dict[str, str]) -> str:
    for path, name in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, name)
    text = re.sub(r"\b(ag|ex|bt|rn|cm)_[0-9a-z]{6,}\b", r"\1_ID", text)
    text = re.sub(r"(REPO_PARENT/[^\s/]+?-)[0-9a-z]{8}(-\d+)", r"\1BATCH\2", text)  # worktree names
    text = re.sub(r"\b[0-9a-f]{64}\b", "SHA256", text)
    text = re.sub(r"\b[0-9a-f]{12}\b", "SHA12", text)
    text = re.sub(r" *\b\d+[smh] ago\b", " N ago", text)  # the padding varies with the width
    return re.sub(r"  events \d+", "  events N", text)


def check(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE or not path.exists():
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
        assert not os.environ.get("CI"), f"snapshot {name} was missing in CI"
    assert text == path.read_text(), f"{name} differs from {path}:\n{text}"


def cli_text(home: Home, *args: str) -> str:
    result = cli(home, "--format", "text", *args)
    assert result.returncode in (0, 2, 3), result.stderr
    return result.stdout


def same_as_the_model(client: Client, tool: str, params: dict[str, Any], text: str) -> None:
    """The CLI's text (JSON through Record) is what the model renders (MCP's text)."""
    model = client.call(tool, params)
    assert mask(render(model) + "\n", {}) == mask(text, {})
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
    models = {tool.result.__name__ for tool in ALL_TOOLS.values()} | {"TranscriptItem"}
    assert set(RENDERERS) <= models, set(RENDERERS) - models
