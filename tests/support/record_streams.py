"""Record real engine stdout lines for the offline parser tests (tests/test_engine_streams.py).

    uv run --frozen python -m tests.support.record_streams [engine ...]

Runs each real engine CLI from node_modules under agent-run against the mock provider, one
scenario each (a shell tool call, then a text answer), and copies the execution's raw stdout
(runtime.jsonl, already redacted) to tests/fixtures/streams/ENGINE/tool_then_text.jsonl.
Re-record when an engine's pinned version changes, then update the expected events.
"""

import shutil
import sys
from pathlib import Path

from tests import engine_harness
from tests.engine_harness import engine_daemon, run_agent, runtime_block
from tests.harness import short_tmpdir
from tests.support.mock_provider import MockProvider, Text, ToolCall

OUT = Path(__file__).parent.parent / "fixtures" / "streams"
ENGINES = {
    "claude": (
        "claude-sonnet-4-5",
        "",
        ToolCall("Bash", {"command": "echo tool-ran", "description": "x"}),
    ),
    "codex": ("gpt-5.5", "", ToolCall("exec_command", {"cmd": "echo tool-ran"})),
    "qwen": (
        "qwen3-coder-plus",
        "/v1",
        ToolCall("run_shell_command", {"command": "echo tool-ran", "description": "x"}),
    ),
}


def record(engine: str) -> Path:
    model, suffix, call = ENGINES[engine]
    with MockProvider([call, Text("The command printed tool-ran.")]) as provider:
        with engine_daemon(runtime_block("r", engine, provider.url + suffix, model)) as (
            home,
            daemon,
        ):
            view = run_agent(daemon, "r", "Run the marker command.", short_tmpdir())
            assert view["state"] == "succeeded", view
            raw = next(home.agents_dir.rglob("runtime.jsonl"))
            target = OUT / engine / "tool_then_text.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(raw, target)
            return target


if __name__ == "__main__":
    engine_harness.running_test_is_marked["engines"] = True  # a deliberate use of the real CLIs
    for name in sys.argv[1:] or list(ENGINES):
        print(record(name))
