"""The `qwen` engine (Qwen Code headless, stream-json in and out).

Qwen Code exits 0 with `is_error: false` on API failures; its result text carries
`[API Error: ...]`, so classification reads the text. Interrupt is honoured only after the
`initialize` control request, which is sent before anything else. It loads `.env` files
walking up from the workdir, so every OPENAI_* variable it reads is set explicitly.
"""

import json
import re
import uuid
from pathlib import Path

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import (
    Completion, EngineEvent, ExecutionPlan, LaunchSpec, WorkerMcp, kind_for_http_status,
)
from agent_run.engines.claude import kind_from_text
from agent_run.engines.environment import base_environment, single_secret
from agent_run.engines.stream_json import control_request, parse_stream_json_line, user_message
from agent_run.home import write_private_file

_API_ERROR = re.compile(r"\[API Error: (.*)", re.S)
_STATUS = re.compile(r"\b(401|403|429|500|502|503|504|529)\b")
_TEXT_KINDS = [
    (re.compile(r"Connection error|ECONNREFUSED|fetch failed", re.I), FailureKind.NETWORK_ERROR),
    (re.compile(r"Request timeout|timed out", re.I), FailureKind.NETWORK_ERROR),
    (re.compile(r"without a finish reason|Unexpected token|JSON|malformed", re.I), FailureKind.STREAM_ERROR),
    (re.compile(r"quota", re.I), FailureKind.QUOTA_EXHAUSTED),
    (re.compile(r"API key|Unauthorized|authentication", re.I), FailureKind.AUTH_FAILED),
]
# Variables Qwen Code (or its OpenAI SDK) would otherwise pick up from the environment or .env.
_OPENAI_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "OPENAI_ORG_ID",
                     "OPENAI_ORGANIZATION", "OPENAI_PROJECT_ID", "OPENAI_API_BASE")


class QwenEngine:
    name = "qwen"
    supports_steer = True
    supports_interrupt = True

    def launch(self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp,
               scratch: Path) -> LaunchSpec:
        rc = plan.runtime_config
        qwen_home = Path(plan.engine_home) / ".qwen"
        qwen_home.mkdir(mode=0o700, parents=True, exist_ok=True)
        generation: dict[str, object] = {}
        if rc.get("max_retries") is not None:
            generation["maxRetries"] = rc["max_retries"]
        if rc.get("request_timeout_seconds") is not None:
            generation["timeout"] = int(rc["request_timeout_seconds"] * 1000)
        settings = {
            "memory": {"enableManagedAutoMemory": False},
            "model": {"generationConfig": generation},
            "security": {"auth": {"selectedType": "openai"}},
            "tools": {"exclude": ["tool_search"]},  # keep the worker tools visible
            "mcpServers": {worker.name: {"command": worker.command, "args": worker.args,
                                         "env": worker.env, "trust": True}},
        }
        settings_path = qwen_home / "settings.json"
        write_private_file(settings_path, json.dumps(settings, indent=2).encode())

        env = base_environment(plan)
        env.update(rc.get("env") or {})
        env.update({name: "" for name in _OPENAI_VARIABLES})
        env.update({"QWEN_HOME": str(qwen_home), "OPENAI_MODEL": plan.model,
                    "OPENAI_BASE_URL": rc.get("base_url") or "", "OPENAI_API_KEY": single_secret(secrets) or ""})
        if rc.get("request_timeout_seconds") is not None:
            env["QWEN_CODE_API_TIMEOUT_MS"] = str(int(rc["request_timeout_seconds"] * 1000))
        env = {k: v for k, v in env.items() if v != "" or k.startswith("OPENAI_")}

        mode = "yolo" if plan.profile == "write" else "plan"
        argv = [rc.get("binary") or "qwen", "--input-format", "stream-json", "--output-format",
                "stream-json", "--model", plan.model, "--approval-mode", mode,
                "--allowed-mcp-server-names", worker.name]
        if plan.resume_session_id:
            argv += ["--resume", plan.resume_session_id]
        else:
            argv += ["--session-id", str(uuid.uuid4())]
        for root in plan.read_roots:
            argv += ["--include-directories", root]
        return LaunchSpec(argv=argv, env=env, cwd=plan.workdir, stdin_pipe=True,
                          token_files=[settings_path])

    def initial_input(self, plan: ExecutionPlan) -> list[bytes]:
        return [control_request("agent-run-init", "initialize"), user_message(plan.prompt)]

    def parse_line(self, line: str) -> list[EngineEvent]:
        return parse_stream_json_line(line)

    def steer_input(self, text: str) -> bytes | None:
        return user_message(text)

    def interrupt_input(self) -> bytes | None:
        return control_request("agent-run-interrupt", "interrupt")

    def classify(self, completion: Completion) -> FailureKind | None:
        api_error = _API_ERROR.search(completion.text)
        if api_error is None and not completion.is_error:
            return None
        detail = api_error.group(1) if api_error else completion.text
        status = _STATUS.search(detail)
        return (kind_for_http_status(int(status.group(1)) if status else completion.error_status, detail)
                or kind_from_text(detail, _TEXT_KINDS) or FailureKind.ERROR_REPLY)
