"""The `qwen` engine (Qwen Code headless, stream-json in and out). Checked against 0.24.4.

Launch: `qwen --input-format stream-json --output-format stream-json` (no `-p`): each user
line on stdin is a turn, a line sent mid-turn is queued as the next turn, and the CLI exits once
stdin is closed and the queue is empty. Interrupt (`control_request` `interrupt`) is honoured
only after the `initialize` control request, so that goes first. All state lives in
`QWEN_HOME`; `settings.json` there carries the retry knobs (under `model.generationConfig`: a
top-level `generationConfig` is ignored), turns off the post-turn memory-extraction request,
and registers the worker tools as a trusted MCP server (`tools.exclude: ["tool_search"]` keeps
them in the model's tool list instead of behind the search tool). `--allowed-mcp-server-names`
keeps a workdir `.qwen/settings.json` from starting servers of its own. Qwen Code loads `.env`
files walking up from the workdir, so every OPENAI_* variable it reads is set explicitly.

The stream is Claude Code's envelope with three differences handled here:
- a failed turn is `result` / `error_during_execution` with its text in `error.message`, not
  `result` (0.15 gave `is_error: false` and the text in `result`: both are classified by the
  `[API Error: ...]` text, never by flags or the exit code, which is 0 either way);
- `result.usage` is cumulative over the whole session (resumes included), so a turn's usage is
  summed from its assistant messages, each of which carries one model call's usage;
- `system` / `retry` lines are retry events: a malformed or cut stream being replayed, or,
  with `attempt`/`maxRetries`/`delayMs`, the outer rate-limit loop (429/503 and throttling
  codes; `maxRetries` = `max_retries`, 60 s apart) that follows the silent inner retries. Those
  lines carry no status; it is on stderr ("Retrying in 60s (attempt 1/2): [API Error: 429 ...]"),
  where the supervisor's give-up reads it.
HTTP 429/5xx and refused connections are retried inside the CLI (7 attempts, 1.5 s to 30 s
backoff, honouring `retry-after` on 429/503 only) with nothing on stdout meanwhile: 75-100 s of
silence that `stall_seconds` must outlast for the failure to be classified rather than stalled.
"""

import json
import re
import uuid
from pathlib import Path
from typing import Any, Literal

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import (
    Completion,
    EngineEvent,
    LaunchSpec,
    RetryEvent,
    Unparsed,
    UsageUpdate,
    WorkerMcp,
)
from agent_run.engines.classify import TextKinds, kind_for_http_status, kind_from_text
from agent_run.engines.environment import base_environment, single_secret
from agent_run.engines.options import HttpRuntimeOptions
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.registry import EngineSpec
from agent_run.engines.stream_json import (
    StreamJsonProtocol,
    control_request,
    events_of,
    load_line,
    usage_numbers,
    user_message,
)
from agent_run.system.home import write_private_file

_API_ERROR = re.compile(r"\[API Error: (.*)", re.S)
# "[API Error: 429 ...]": the status leads; some SDK errors say "status code 500" instead.
_STATUS = re.compile(r"^(\d{3})\b|\bstatus(?: code)? (\d{3})\b", re.I)
# Quota exhaustion is its own message ("Quota exhausted: ..."); every other 429 gets a
# "Possible quota limitations in place ..." hint on a second line, which is dropped before
# classifying so that it does not read as quota.
_TEXT_KINDS: TextKinds = [
    (re.compile(r"Quota exhausted|quota exceeded", re.I), FailureKind.QUOTA_EXHAUSTED),
    (
        re.compile(r"Connection error|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|fetch failed", re.I),
        FailureKind.NETWORK_ERROR,
    ),
    (re.compile(r"Request timeout|timed out|ETIMEDOUT", re.I), FailureKind.NETWORK_ERROR),
    (
        re.compile(
            r"without a finish reason|in JSON at position|Unexpected token|malformed"
            r"|terminated|UND_ERR_SOCKET|other side closed|ECONNRESET",
            re.I,
        ),
        FailureKind.STREAM_ERROR,
    ),
    (re.compile(r"API key|Unauthorized|authentication", re.I), FailureKind.AUTH_FAILED),
    (re.compile(r"overloaded", re.I), FailureKind.PROVIDER_OVERLOADED),
    (re.compile(r"rate limit", re.I), FailureKind.RATE_LIMITED),
]
# Variables Qwen Code (or its OpenAI SDK) would otherwise pick up from the environment or .env.
_OPENAI_VARIABLES = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_MODEL",
    "OPENAI_ORG_ID",
    "OPENAI_ORGANIZATION",
    "OPENAI_PROJECT_ID",
    "OPENAI_API_BASE",
)
# Tools that change the workdir or run commands; left out of the read-only profile.
WRITE_TOOLS = ["run_shell_command", "write_file", "edit", "replace"]


OPENAI_URL = "https://api.openai.com/v1"


class QwenOptions(HttpRuntimeOptions):
    engine: Literal["qwen"]


def _settings(plan: ExecutionPlan, rc: HttpRuntimeOptions, worker: WorkerMcp) -> dict[str, Any]:
    """`$QWEN_HOME/settings.json`: retry knobs where Qwen Code reads them, no memory extraction,
    no telemetry or updates, the profile's tools, and the worker tools as a trusted server."""
    generation: dict[str, object] = {}
    if rc.max_retries is not None:
        generation["maxRetries"] = rc.max_retries
    if rc.request_timeout_seconds is not None:
        generation["timeout"] = int(rc.request_timeout_seconds * 1000)
    exclude = ["tool_search"]  # keep the worker tools visible, not behind tool search
    if plan.profile != "write":
        exclude += WRITE_TOOLS
    return {
        "memory": {"enableManagedAutoMemory": False},
        "model": {"generationConfig": generation},
        "security": {"auth": {"selectedType": "openai"}},
        "tools": {"exclude": exclude},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False},
        "mcpServers": {
            worker.name: {
                "command": worker.command,
                "args": worker.args,
                "env": worker.env,
                "trust": True,
            }
        },
    }


def _environment(
    plan: ExecutionPlan, rc: HttpRuntimeOptions, secrets: dict[str, str], qwen_home: Path
) -> dict[str, str]:
    """Every OPENAI_* variable set explicitly (Qwen Code reads `.env` files up from the
    workdir), the provider and its key, no unattended retry, no telemetry."""
    env = base_environment(plan)
    env.update(rc.env)
    env.update({name: "" for name in _OPENAI_VARIABLES})
    env.update(
        {
            "QWEN_HOME": str(qwen_home),
            "OPENAI_MODEL": plan.model,
            "OPENAI_BASE_URL": rc.base_url or "",
            "OPENAI_API_KEY": single_secret(secrets) or "",
            "QWEN_CODE_UNATTENDED_RETRY": "0",  # never retry 429/529 forever
            "QWEN_USAGE_STATISTICS_ENABLED": "0",
            "QWEN_TELEMETRY_ENABLED": "0",
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }
    )
    if rc.request_timeout_seconds is not None:
        env["QWEN_CODE_API_TIMEOUT_MS"] = str(int(rc.request_timeout_seconds * 1000))
    return {k: v for k, v in env.items() if v != "" or k.startswith("OPENAI_")}


class QwenEngine(StreamJsonProtocol):
    """Stream-json like Claude Code; it differs in its first input (initialize), its retry
    lines, its usage totals and its error results."""

    name = "qwen"

    def __init__(self) -> None:
        self._turn_usage: dict[str, float] = {}
        self._counted: set[str] = set()  # assistant message ids whose usage is summed
        self._retries = 0

    def launch(
        self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp, scratch: Path
    ) -> LaunchSpec:
        rc = plan.runtime_config
        assert isinstance(rc, HttpRuntimeOptions)
        qwen_home = Path(plan.engine_home) / ".qwen"
        qwen_home.mkdir(mode=0o700, parents=True, exist_ok=True)
        settings_path = qwen_home / "settings.json"
        write_private_file(
            settings_path,
            json.dumps(_settings(plan, rc, worker), indent=2).encode(),
            durable=False,  # written again at each launch
        )
        env = _environment(plan, rc, secrets, qwen_home)
        # yolo: every tool runs without a prompt. `default` in headless mode denies tools that
        # would need one; the write tools are excluded from the settings as well.
        mode = "yolo" if plan.profile == "write" else "default"
        argv = [
            rc.binary or "qwen",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--model",
            plan.model,
            "--approval-mode",
            mode,
            "--allowed-mcp-server-names",
            worker.name,
        ]
        if plan.resume_session_id:
            argv += ["--resume", plan.resume_session_id]
        else:
            argv += ["--session-id", str(uuid.uuid4())]
        for root in plan.read_roots:
            argv += ["--include-directories", root]
        return LaunchSpec(
            argv=argv, env=env, cwd=plan.workdir, stdin_pipe=True, token_files=[settings_path]
        )

    def initial_input(self, plan: ExecutionPlan, prompt: str) -> list[bytes]:
        return [control_request("agent-run-init", "initialize"), user_message(prompt)]

    def parse_line(self, line: str) -> list[EngineEvent]:
        obj = load_line(line)
        if obj is None:
            return [Unparsed(line)]
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "retry":
            return [self._retry(obj.get("data") or {})]
        events = events_of(obj)
        if kind == "assistant" and self._add_usage(obj.get("message") or {}):
            events = [UsageUpdate(dict(self._turn_usage)), *events]  # the turn's usage so far
        if kind == "result":
            events = [
                self._completion(obj, event) for event in events if isinstance(event, Completion)
            ]
        return events

    def _retry(self, data: dict[str, Any]) -> RetryEvent:
        self._retries += 1
        if "maxRetries" in data:  # the outer rate-limit loop
            seconds = (data.get("delayMs") or 0) / 1000
            return RetryEvent(
                None,
                data.get("attempt") or self._retries,
                f"rate-limit retry {data.get('attempt')}/{data.get('maxRetries')} in {seconds:g}s",
            )
        return RetryEvent(
            None, self._retries, f"model stream replayed ({data.get('reason', 'retry')})"
        )

    def _add_usage(self, message: dict[str, Any]) -> bool:
        """Count a model call's usage once; whether this line added any."""
        message_id = str(message.get("id") or "")
        if message_id in self._counted:
            return False
        self._counted.add(message_id)
        usage = usage_numbers(message.get("usage"))
        for key, value in usage.items():
            self._turn_usage[key] = self._turn_usage.get(key, 0) + value
        return bool(usage)

    def _completion(self, obj: dict[str, Any], parsed: Completion) -> Completion:
        error = obj.get("error")
        text = parsed.text
        if not text and isinstance(error, dict):
            text = str(error.get("message") or "")
        usage, self._turn_usage = self._turn_usage, {}
        return Completion(
            text=text,
            is_error=parsed.is_error,
            error_status=parsed.error_status,
            subtype=parsed.subtype,
            usage=usage or None,
            cost_usd=parsed.cost_usd,
        )

    def classify(self, completion: Completion) -> FailureKind | None:
        api_error = _API_ERROR.search(completion.text)
        if api_error is None and not completion.is_error:
            return None
        detail = (api_error.group(1) if api_error else completion.text).strip()
        first = detail.splitlines()[0].rstrip("]").strip() if detail else ""
        if kind_from_text(first, _TEXT_KINDS[:1]):
            return FailureKind.QUOTA_EXHAUSTED
        match = _STATUS.search(first)
        status = int(match.group(1) or match.group(2)) if match else completion.error_status
        return (
            kind_for_http_status(status, first)
            or kind_from_text(first, _TEXT_KINDS)
            or FailureKind.ERROR_REPLY
        )


SPEC = EngineSpec(
    name="qwen",
    factory=QwenEngine,
    options=QwenOptions,
    summary="Qwen Code (headless, stream-json)",
    default_binary="qwen",
    config_example={
        "engine": "qwen",
        "models": ["qwen3-coder-plus"],
        "auth": {"env": "DASHSCOPE_API_KEY"},
    },
    broker_upstream=OPENAI_URL,
    # Qwen Code's OAuth (`~/.qwen/oauth_creds.json`) was discontinued on 2026-04-15 and 0.24.4
    # no longer offers it.
    no_native_login="Qwen OAuth was discontinued on 2026-04-15 (Qwen Code 0.24.4 no longer "
    "offers it): use an API key (auth.env or auth.file)",
)
