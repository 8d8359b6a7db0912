"""Messages and help name a param in the caller's terms: the CLI's flags (`--confirm`,
`--force`, `--reopen`, `--dry-run`) in its help, its JSON and text output and its error lines;
the param names (`confirm=true`) on the socket and over MCP, whose callers send params."""

import asyncio
import json
import re
from pathlib import Path

from agent_run.cli.main import cli as root_command
from agent_run.cli.main import command_for
from agent_run.system.home import Home
from agent_run.tools.table import TOOLS
from tests.batch_harness import BatchProject, runs_of, wait_batch
from tests.harness import cli, cli_json
from tests.mcp_harness import mcp_session

API_FORM = re.compile(r"\b[a-z_]+=(true|false)\b")


def _dirty_clean_preview(batch_project: BatchProject) -> dict:
    """A finished repeated batch whose one worktree has an uncommitted file (needs --force)."""
    done = batch_project.finish("repeated", states=("completed",), runs=1, prompt="answer: x")
    worktree = Path(runs_of(done, "worker")[0]["worktree"])
    (worktree / "scratch.txt").write_text("not committed\n")
    return done


def test_the_cli_says_its_flags_in_help_json_text_and_errors(
    batch_project: BatchProject, home: Home
) -> None:
    for verb in ("batch clean", "run followup", "run merge", *(t.cli_verb for t in TOOLS.values())):
        command = command_for(root_command, verb)
        assert not API_FORM.search(command.help or ""), (verb, command.help)
    assert "(--confirm) remove" in command_for(root_command, "batch clean").help
    assert "unless --force" in command_for(root_command, "batch clean").help
    assert "reopened with --reopen" in command_for(root_command, "run followup").help
    assert "--dry-run only checks" in command_for(root_command, "run merge").help

    batch = _dirty_clean_preview(batch_project)
    preview = cli_json(home, "batch", "clean", batch["id"])
    assert "run again with --confirm to remove" in preview["message"], preview
    assert "(add --force to remove them too)" in preview["message"], preview
    assert not API_FORM.search(preview["message"])
    text = cli(home, "--format", "text", "batch", "clean", batch["id"]).stdout
    assert "--confirm" in text and "--force" in text and not API_FORM.search(text), text

    ranked = batch_project.start_ranked_pair("score: 60")
    candidate = runs_of(wait_batch(batch_project.daemon, ranked["id"]), "candidate")[0]
    locked = cli(home, "run", "followup", candidate["id"], "--text", "answer: more")
    assert locked.returncode == 1
    error = json.loads(locked.stdout)["error"]
    assert error["code"] == "RunLocked" and error["field"] == "reopen"
    assert "pass --reopen to unlock it" in error["message"], error
    text = cli(home, "--format", "text", "run", "followup", candidate["id"], "--text", "more")
    assert "pass --reopen to unlock it" in text.stderr, text.stderr


def test_the_socket_and_mcp_name_the_params(batch_project: BatchProject, home: Home) -> None:
    batch = _dirty_clean_preview(batch_project)
    preview = batch_project.daemon.call("batch_clean", {"batch_id": batch["id"]})
    assert "run again with confirm=true to remove" in preview["message"], preview
    assert "(add force=true to remove them too)" in preview["message"], preview
    assert "--" not in preview["message"]
    assert "(confirm=true) remove" in TOOLS["batch_clean"].doc  # MCP's and docs/api.md's words

    async def over_mcp() -> str:
        async with mcp_session(home) as session:
            result = await session.call_tool("batch_clean", {"batch_id": batch["id"]})
            assert not result.is_error, result.content
            assert "confirm=true" in result.structured_content["message"]
            return " ".join(block.text for block in result.content)

    text = asyncio.run(over_mcp())
    assert "run again with confirm=true to remove" in text and "--confirm" not in text, text
