"""The `demo` engine adapter: launches `demo_program` and speaks stream-json to it."""

import json
import sys
import uuid
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import Completion, EngineEvent, LaunchSpec, SteerJoined, WorkerMcp
from agent_run.engines.classify import kind_for_http_status
from agent_run.engines.demo_program import parse_quota
from agent_run.engines.environment import base_environment
from agent_run.engines.options import RuntimeOptions
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.registry import EngineSpec
from agent_run.engines.stream_json import StreamJsonProtocol, load_line
from agent_run.system.home import write_private_file


class DemoOptions(RuntimeOptions):
    """The demo calls no provider: the common keys, and the quota readings it reports."""

    engine: Literal["demo"]
    quota: dict[str, float] = Field(
        default_factory=dict,
        description="window (`5h`, `7d`, `LANE/5h`, `LANE/7d`) -> percent left the demo "
        "reports each turn as Claude Code's quota lines (docs/capacity.md, offline)",
    )

    @field_validator("quota")
    @classmethod
    def _quota_windows(cls, quota: dict[str, float]) -> dict[str, float]:
        for name, left in quota.items():
            parse_quota([f"{name}={left!r}"])  # ValueError naming the window
        return quota


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
        quota = getattr(plan.runtime_config, "quota", None)
        if quota:
            argv += ["--quota", ",".join(f"{name}={left!r}" for name, left in quota.items())]
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
