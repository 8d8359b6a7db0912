"""A test-only engine, `echo`, registered from outside `src/` exactly as a third party would.

`tests/test_engine_registry.py` installs it through an entry point (a `.dist-info` on
PYTHONPATH, group `agent_run.engines`: `echo = tests.support.fake_engine:SPEC`), so the daemon
and the supervisors it spawns (PYTHONPATH is in their allowlist) find it in their own
processes. Its program (`fake_engine_program.py`) speaks a line protocol of its own: each stdin
line is a turn; it answers with JSON lines `session`, `say`, `done`. `greeting` is an option
only this engine takes.

It has a native sign-in of its own, declared only here (`SIGN_IN`): `echo-auth.json` in
`$ECHO_HOME` (default `~/.echo`), `{"token": ..., "email": ...}`, written by `BINARY login
--with-api-key` from a key on stdin (`fake_engine_login.py`). With `auth = { login = "native" }`
the supervisor links the real file into the generated home, and each answer says the token it
read through that link (which the redactor must hide).
"""

import json
import sys
import uuid
from pathlib import Path
from typing import Any, Literal

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
from agent_run.engines.signin import Credential, SignIn, is_native, token_strings

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
        env = base_environment(plan)
        if is_native(options.auth):  # the sign-in's folder in the generated home holds the link
            env[SIGN_IN.dir_variable] = str(SIGN_IN.link_path(plan.engine_home).parent)
        return LaunchSpec(argv=argv, env=env, cwd=plan.workdir, stdin_pipe=True)

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


def _credential(data: dict[str, Any]) -> Credential:
    token = data.get("token")
    return Credential("token", token_strings([token]), usable=bool(token))


SIGN_IN = SignIn(
    "echo",
    "Echo",
    "ECHO_HOME",
    "~/.echo",
    "echo-auth.json",
    ".echo",
    ("login",),
    _credential,
    key_variable="ECHO_API_KEY",
    key_flag="--with-api-key",
    email_sources=(("echo-auth.json", lambda data: data.get("email")),),
)

SPEC = EngineSpec(
    name="echo",
    factory=EchoEngine,
    options=EchoOptions,
    summary="test-only: answers each line with a greeting",
    sign_in=SIGN_IN,
)
