"""The `claude` engine (Claude Code, `claude -p` with stream-json in and out) and `glm`.

GLM is the same CLI pointed at an Anthropic-compatible endpoint with a Bearer token and GLM
model names. Steer is a user message on stdin; interrupt is the `interrupt` control request.

A steer does not always open a turn: Claude Code (2.1.332) folds a message that arrives while a
tool runs into the running turn (as a system reminder in the next tool result) and ends both
with one `result`; one that arrives while the model streams text is queued as the next turn.
With `--replay-user-messages` Claude Code echoes each user message (`isReplay: true`) when it
takes it in, so a message echoed before the running turn's `result` joined that turn.
"""

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import (
    Completion,
    EngineEvent,
    LaunchSpec,
    SteerJoined,
    Unparsed,
    WorkerMcp,
)
from agent_run.engines.classify import TextKinds, kind_for_http_status, kind_from_text
from agent_run.engines.environment import base_environment, single_secret
from agent_run.engines.options import HttpRuntimeOptions
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.registry import EngineSpec
from agent_run.engines.signin import Credential, SignIn, is_native, token_strings
from agent_run.engines.stream_json import StreamJsonProtocol, load_line
from agent_run.system.home import write_private_file

READ_TOOLS = ["Read", "Grep", "Glob", "LS"]
WRITE_TOOLS = ["Bash", "Write", "Edit", "MultiEdit", "NotebookEdit"]

# Claude Code's error texts when no HTTP status is attached (ENGINES.md, observed).
_TEXT_KINDS: TextKinds = [
    (
        re.compile(r"Unable to connect|ConnectionRefused|ECONNREFUSED|fetch failed", re.I),
        FailureKind.NETWORK_ERROR,
    ),
    (re.compile(r"Request timed out|timed out", re.I), FailureKind.NETWORK_ERROR),
    (
        re.compile(
            r"empty or malformed response|malformed|Connection to the API was lost|ECONNRESET", re.I
        ),
        FailureKind.STREAM_ERROR,
    ),
    (re.compile(r"Invalid API key|Not logged in|authentication", re.I), FailureKind.AUTH_FAILED),
    (re.compile(r"overloaded", re.I), FailureKind.PROVIDER_OVERLOADED),
    (re.compile(r"rate limit|\(429\)", re.I), FailureKind.RATE_LIMITED),
]

ANTHROPIC_URL = "https://api.anthropic.com"


class ClaudeOptions(HttpRuntimeOptions):
    engine: Literal["claude"]


class GlmOptions(HttpRuntimeOptions):
    engine: Literal["glm"]


def _argv(
    plan: ExecutionPlan, rc: HttpRuntimeOptions, mcp_config: Path, worker_tools: list[str]
) -> list[str]:
    """`claude -p` in stream-json both ways, the worker tools' MCP config only, the tools its
    profile allows, and its session (resumed or new)."""
    if plan.profile == "write":
        allowed, mode, denied = READ_TOOLS + WRITE_TOOLS + worker_tools, "acceptEdits", []
    else:
        allowed, mode, denied = READ_TOOLS + worker_tools, "default", WRITE_TOOLS
    argv = [
        rc.binary or "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--replay-user-messages",
        "--verbose",
        "--model",
        plan.model,
        "--setting-sources",
        "",
        "--strict-mcp-config",
        "--mcp-config",
        str(mcp_config),
        "--allowedTools",
        ",".join(allowed),
        "--permission-mode",
        mode,
    ]
    if denied:
        argv += ["--disallowedTools", ",".join(denied)]
    if plan.resume_session_id:
        argv += ["--resume", plan.resume_session_id]
    else:
        argv += ["--session-id", str(uuid.uuid4())]
    for root in plan.read_roots:
        argv += ["--add-dir", root]
    return argv


class ClaudeEngine(StreamJsonProtocol):
    name = "claude"
    key_variable = "ANTHROPIC_API_KEY"  # sent as x-api-key

    def __init__(self) -> None:
        self._turn_open = False  # a user message of the running turn has been taken in

    def launch(
        self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp, scratch: Path
    ) -> LaunchSpec:
        rc = plan.runtime_config
        assert isinstance(rc, HttpRuntimeOptions)
        env = self._environment(plan, rc, secrets)
        mcp_config = scratch / "mcp.json"
        server = {
            "type": "stdio",
            "command": worker.command,
            "args": worker.args,
            "env": worker.env,
        }
        write_private_file(
            mcp_config, json.dumps({"mcpServers": {worker.name: server}}).encode(), durable=False
        )
        argv = _argv(plan, rc, mcp_config, [f"mcp__{worker.name}__{tool}" for tool in worker.tools])
        return LaunchSpec(
            argv=argv, env=env, cwd=plan.workdir, stdin_pipe=True, token_files=[mcp_config]
        )

    def _environment(
        self, plan: ExecutionPlan, rc: HttpRuntimeOptions, secrets: dict[str, str]
    ) -> dict[str, str]:
        """Its config folder in the generated home, the provider and its key (the broker's token)
        or the user's native sign-in, retries, timeouts and the model's variables."""
        home = Path(plan.engine_home)
        env = base_environment(plan)
        env.update(rc.env)
        env.update(
            {
                "CLAUDE_CONFIG_DIR": str(home / ".claude"),
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "MCP_CONNECTION_NONBLOCKING": "0",  # -p must wait for the worker tools
                "CLAUDE_CODE_MCP_ALLOWLIST_ENV": "1",  # MCP servers do not inherit the API key
            }
        )
        if rc.base_url:
            env["ANTHROPIC_BASE_URL"] = rc.base_url
        if is_native(rc.auth):  # the user's own sign-in, in its real folder
            env.update(SIGN_IN.engine_env(rc.auth))
        secret = single_secret(secrets)
        if secret is not None:
            env[self.key_variable] = secret
        if rc.max_retries is not None:
            env["CLAUDE_CODE_MAX_RETRIES"] = str(rc.max_retries)
        if rc.request_timeout_seconds is not None:
            env["API_TIMEOUT_MS"] = str(int(rc.request_timeout_seconds * 1000))
        env.update(self.model_env(plan.model))
        return env

    def model_env(self, model: str) -> dict[str, str]:
        return {}

    def parse_line(self, line: str) -> list[EngineEvent]:
        obj = load_line(line)
        if obj is None:
            return [Unparsed(line)]
        if obj.get("type") == "user" and obj.get("isReplay"):
            if self._turn_open:  # taken into the running turn (a steer sent mid-tool)
                return [SteerJoined()]
            self._turn_open = True  # the first message of a turn
            return []
        if obj.get("type") == "result":
            self._turn_open = False
        return self.events_with_usage(obj)

    def classify(self, completion: Completion) -> FailureKind | None:
        if not completion.is_error:
            return None
        return (
            kind_for_http_status(completion.error_status, completion.text)
            or kind_from_text(completion.text, _TEXT_KINDS)
            or FailureKind.ERROR_REPLY
        )


class GlmEngine(ClaudeEngine):
    name = "glm"
    key_variable = "ANTHROPIC_AUTH_TOKEN"  # sent as a Bearer token

    def model_env(self, model: str) -> dict[str, str]:
        return {
            "ANTHROPIC_MODEL": model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
        }


def _credential(data: dict[str, Any]) -> Credential:
    """`.credentials.json`: `{"claudeAiOauth": {accessToken, refreshToken, expiresAt (ms)}}`."""
    found = data.get("claudeAiOauth")
    oauth: dict[str, Any] = found if isinstance(found, dict) else {}
    secrets = token_strings([oauth.get("accessToken"), oauth.get("refreshToken")])
    expires_ms = oauth.get("expiresAt")
    expires = expires_ms / 1000 if isinstance(expires_ms, (int, float)) else None
    access_valid = bool(oauth.get("accessToken")) and (expires is None or expires > time.time())
    return Credential(
        "oauth", secrets, usable=bool(oauth.get("refreshToken")) or access_valid, expires_at=expires
    )


def _email(data: dict[str, Any]) -> Any:
    """`.claude.json`'s `oauthAccount`."""
    account = data.get("oauthAccount")
    return account.get("emailAddress") if isinstance(account, dict) else None


# Checked against claude-code 2.1.332: `CLAUDE_SECURESTORAGE_CONFIG_DIR` moves its credential
# store (and its OAuth refresh lock, `.oauth_refresh.lock.owner`) out of `CLAUDE_CONFIG_DIR`: it
# is set to the real folder, so refreshes are written there (temp file + rename) under Claude
# Code's own lock, shared by every agent. No link: Claude Code's credential writer does not
# follow links (a refresh would replace one with a private copy).
SIGN_IN = SignIn(
    "claude",
    "Claude Code",
    "CLAUDE_CONFIG_DIR",
    "~/.claude",
    ".credentials.json",
    ".claude",
    ("auth", "login"),
    _credential,
    store_variable="CLAUDE_SECURESTORAGE_CONFIG_DIR",
    # Its refresh lock (a proper-lockfile folder) and the lock's owner record.
    refresh_names=(".oauth_refresh.lock",),
    refused_on={
        "darwin": "on macOS Claude Code keeps its sign-in in the login keychain, "
        "not in a file agent-run can link: use an API key (auth.env)"
    },
    key_variable="ANTHROPIC_API_KEY",
    email_sources=((".claude.json", _email),),
)

CLAUDE_SPEC = EngineSpec(
    name="claude",
    factory=ClaudeEngine,
    options=ClaudeOptions,
    summary="Claude Code (`claude -p`, stream-json)",
    default_binary="claude",
    config_example={
        "engine": "claude",
        "models": ["claude-sonnet-4-5"],
        "auth": {"login": "native"},
    },
    broker_upstream=ANTHROPIC_URL,
    sign_in=SIGN_IN,
)
GLM_SPEC = EngineSpec(
    name="glm",
    factory=GlmEngine,
    options=GlmOptions,
    summary="GLM through Claude Code (an Anthropic-compatible endpoint)",
    default_binary="claude",
    config_example={
        "engine": "glm",
        "models": ["glm-4.6"],
        "base_url": "https://api.z.ai/api/anthropic",
        "auth": {"env": "ZAI_API_KEY"},
    },
    broker_upstream=ANTHROPIC_URL,
    no_native_login="GLM has no native sign-in: use an API key (auth.env or auth.file)",
)
