"""A test-only engine, `echo`, registered from outside `src/` exactly as a third party would.

`tests/test_engine_registry.py` installs it through an entry point (a `.dist-info` on
PYTHONPATH, group `agent_run.engines`: `echo = tests.support.fake_engine:SPEC`), so the daemon
and the supervisors it spawns (PYTHONPATH is in their allowlist) find it in their own
processes. Its program (`fake_engine_program.py`) speaks a line protocol of its own: each stdin
line is a turn; it answers with JSON lines `session`, `say`, `done`. `greeting` is an option
only this engine takes.
"""

import json
import sys
import uuid
from pathlib import Path
from typing import Literal

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import (
    Completion,
    EngineEvent,
    LaunchSpec,
    MessageEvent,
    SessionStarted,
    Unparsed,
    WorkerMcp,
)
from agent_run.engines.environment import base_environment
from agent_run.engines.options import RuntimeOptions
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.registry import EngineSpec

PROGRAM = Path(__file__).with_name("fake_engine_program.py")


class EchoOptions(RuntimeOptions):
    engine: Literal["echo"]
    greeting: str = "echo"


class EchoEngine:
    name = "echo"

    def launch(
        self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp, scratch: Path
    ) -> LaunchSpec:
        options = plan.runtime_config
        assert isinstance(options, EchoOptions)
        session = plan.resume_session_id or str(uuid.uuid4())
        argv = [sys.executable, str(PROGRAM), "--greeting", options.greeting, "--session", session]
        return LaunchSpec(argv=argv, env=base_environment(plan), cwd=plan.workdir, stdin_pipe=True)

    def initial_input(self, plan: ExecutionPlan, prompt: str) -> list[bytes]:
        return [self._line(prompt)]

    def _line(self, text: str) -> bytes:
        return json.dumps(text).encode() + b"\n"  # one line, whatever the text holds

    def parse_line(self, line: str) -> list[EngineEvent]:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            return [Unparsed(line)]
        kind = obj.get("t") if isinstance(obj, dict) else None
        if kind == "session":
            return [SessionStarted(obj["id"], "echo-1")]
        if kind == "say":
            return [MessageEvent("assistant", obj["text"])]
        if kind == "done":
            return [Completion(text=obj["text"], is_error=False, subtype="done")]
        return [Unparsed(line)]

    def steer_input(self, text: str) -> bytes | None:
        return self._line(text)  # the next turn

    def interrupt_input(self) -> bytes | None:
        return None  # no interrupt in this protocol: the supervisor terminates the group

    def classify(self, completion: Completion) -> FailureKind | None:
        return FailureKind.ERROR_REPLY if completion.is_error else None


SPEC = EngineSpec(
    name="echo",
    factory=EchoEngine,
    options=EchoOptions,
    summary="test-only: answers each line with a greeting",
)
