"""Record real engine stdout lines for the offline parser tests (tests/test_engine_streams.py).

    uv run --frozen python -m tests.support.record_streams [ENGINE[:SCENARIO] ...]

Runs each real engine CLI from node_modules under agent-run against the mock provider and copies
the execution's raw stdout (runtime.jsonl, already redacted) to
tests/fixtures/streams/ENGINE/SCENARIO.jsonl. Scenarios: `tool_then_text` (a shell tool call,
then a text answer), `auth_failed` (HTTP 401 to every request) and `rate_limited` (HTTP 429 with
`retry-after: 1`). With no argument, every engine and scenario is recorded. Re-record when an
engine's pinned version changes, then update the expected events.
"""

import shutil
import sys
from pathlib import Path

from tests import engine_harness
from tests.engine_harness import engine_daemon, run_agent, runtime_block
from tests.harness import short_tmpdir
from tests.support.mock_provider import Fault, MockProvider, Reply, Text, ToolCall

OUT = Path(__file__).parent.parent / "fixtures" / "streams"
TASK = "Run the marker command."
ENGINES = {
    "claude": (
        "claude-sonnet-4-5",
        "",
        ToolCall("Bash", {"command": "echo tool-ran", "description": "x"}),
    ),
    "glm": ("glm-4.6", "", ToolCall("Bash", {"command": "echo tool-ran", "description": "x"})),
    "codex": ("gpt-5.5", "/v1", ToolCall("exec_command", {"cmd": "echo tool-ran"})),
    "qwen": (
        "qwen3-coder-plus",
        "/v1",
        ToolCall("run_shell_command", {"command": "echo tool-ran", "description": "x"}),
    ),
}
# scenario -> (what the provider answers, the state and failure kind the run must end with)
SCENARIOS: dict[str, tuple[list[Reply] | None, tuple[str, str | None]]] = {
    "tool_then_text": (None, ("succeeded", None)),
    "auth_failed": ([Fault.http(401, times=None)], ("failed", "auth_failed")),
    "rate_limited": ([Fault.http(429, retry_after=1, times=None)], ("failed", "rate_limited")),
}


def record(engine: str, scenario: str) -> Path:
    model, suffix, call = ENGINES[engine]
    replies, expected = SCENARIOS[scenario]
    with MockProvider(replies or [call, Text("The command printed tool-ran.")]) as provider:
        block = runtime_block("r", engine, provider.url + suffix, model, stall_seconds=60.0)
        with engine_daemon(block) as (home, daemon):
            view = run_agent(daemon, "r", TASK, short_tmpdir(), timeout=180)
            assert (view["state"], view["failure_kind"]) == expected, view
            raw = next(home.agents_dir.rglob("runtime.jsonl"))
            target = OUT / engine / f"{scenario}.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(raw, target)
            return target


def main(args: list[str]) -> None:
    engine_harness.running_test_is_marked["engines"] = True  # a deliberate use of the real CLIs
    wanted = args or [f"{e}:{s}" for e in ENGINES for s in SCENARIOS]
    for item in wanted:
        engine, _, scenario = item.partition(":")
        for name in [scenario] if scenario else list(SCENARIOS):
            print(record(engine, name))


if __name__ == "__main__":
    main(sys.argv[1:])
