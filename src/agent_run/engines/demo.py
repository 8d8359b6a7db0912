"""The `demo` engine adapter: launches `demo_program` and speaks stream-json to it."""

import json
import sys
import uuid
from pathlib import Path
from typing import Literal

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import Completion, EngineEvent, LaunchSpec, SteerJoined, WorkerMcp
from agent_run.engines.classify import kind_for_http_status
from agent_run.engines.environment import base_environment
from agent_run.engines.options import RuntimeOptions
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.registry import EngineSpec
from agent_run.engines.stream_json import StreamJsonProtocol, load_line
from agent_run.system.home import write_private_file


class DemoOptions(RuntimeOptions):
    """The demo calls no provider: only the common keys."""

    engine: Literal["demo"]


class DemoEngine(StreamJsonProtocol):
    name = "demo"

    def launch(
        self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp, scratch: Path
    ) -> LaunchSpec:
        env = base_environment(plan)
        env.update(plan.runtime_config.env)
        env.update(secrets)
        # The same file shape as Claude Code's --mcp-config.
        mcp_config = scratch / "mcp.json"
        servers = {worker.name: {"command": worker.command, "args": worker.args, "env": worker.env}}
        write_private_file(mcp_config, json.dumps({"mcpServers": servers}).encode(), durable=False)
        argv = [
            sys.executable,
            "-m",
            "agent_run.engines.demo_program",
            "--model",
            plan.model,
            "--mcp-config",
            str(mcp_config),
            "--profile",
            plan.profile,
        ]
        if plan.resume_session_id:
            argv += ["--resume", plan.resume_session_id]
        else:
            argv += ["--session-id", str(uuid.uuid4())]
        return LaunchSpec(
            argv=argv, env=env, cwd=plan.workdir, stdin_pipe=True, token_files=[mcp_config]
        )

    def parse_line(self, line: str) -> list[EngineEvent]:
        """As stream-json, but an echoed user message (`isReplay`, `fold_steers: yes`) is a steer
        the running turn took in: no turn of its own will answer it."""
        obj = load_line(line)
        if obj is not None and obj.get("type") == "user" and obj.get("isReplay"):
            return [SteerJoined()]
        return super().parse_line(line)

    def classify(self, completion: Completion) -> FailureKind | None:
        if completion.is_error:
            return (
                kind_for_http_status(completion.error_status, completion.text)
                or FailureKind.ERROR_REPLY
            )
        return None


SPEC = EngineSpec(
    name="demo",
    factory=DemoEngine,
    options=DemoOptions,
    summary="offline, scripted by the task text (`agent-run doc demo`)",
    no_native_login="the demo engine needs no sign-in",
)
