"""The `codex` engine: OpenAI Codex CLI as `codex app-server`, line-delimited JSON-RPC on stdio.

Everything Codex reads is generated into `$CODEX_HOME/config.toml` (one per agent): the model
provider (base URL, retries, stream idle timeout, the *name* of the key variable) and the
worker-tools MCP server, whose env carries the capability token, so the file is a token file.
argv is only `codex app-server`; the key travels in one environment variable. With a native
login (`auth.login = "native"`) there is no key: the user's `auth.json` is linked into
`$CODEX_HOME` (engines/signin.py) and the provider has `requires_openai_auth = true`.

The handshake is driven from `parse_line`: `initialize` -> `initialized` + `thread/start` (or
`thread/resume` of `plan.resume_session_id`) -> `turn/start`. A steer is `turn/steer`, which
Codex folds into the running turn (one `turn/completed` for both), hence
`steer_opens_turn = False`. Interrupt is `turn/interrupt`. Approval requests are answered by
profile (accept in `write`, decline in `read_only`). Sandbox: `danger-full-access` for `write`
(agent-run's own isolation applies), `read-only` for `read_only` (Codex's bundled bubblewrap
enforces it when none is installed). Failures arrive as `error` notifications with a structured
`codexErrorInfo`: `willRetry: true` becomes a RetryEvent (a refused connection retries forever,
so the supervisor's retry give-up ends it as `network_error`); the failed `turn/completed`
carries the same error, which `classify` maps by `codexErrorInfo` and HTTP status first, text
second.
"""

import json
import re
from pathlib import Path
from typing import Any, Literal

import tomli_w

from agent_run.domain.failures import FailureKind
from agent_run.engines.base import (
    Completion,
    EngineEvent,
    EngineNote,
    LaunchSpec,
    MessageEvent,
    RetryEvent,
    SendInput,
    SessionStarted,
    Unparsed,
    UsageUpdate,
    WorkerMcp,
)
from agent_run.engines.classify import TextKinds, kind_for_http_status, kind_from_text
from agent_run.engines.environment import base_environment, single_secret
from agent_run.engines.options import HttpRuntimeOptions
from agent_run.engines.plan import ExecutionPlan
from agent_run.engines.quota import QuotaEvent, codex_windows, reset_credits, with_credits
from agent_run.engines.registry import EngineSpec
from agent_run.engines.signin import (
    Credential,
    SignIn,
    is_native,
    jwt_claims,
    jwt_expiry,
    token_strings,
)
from agent_run.system.home import write_private_file

PROVIDER = "agent_run"
KEY_VARIABLE = "AGENT_RUN_CODEX_API_KEY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"

# codexErrorInfo given as a bare string.
_INFO_KINDS = {
    "unauthorized": FailureKind.AUTH_FAILED,
    "rateLimitExceeded": FailureKind.RATE_LIMITED,
    "usageLimitExceeded": FailureKind.QUOTA_EXHAUSTED,
    "sessionBudgetExceeded": FailureKind.QUOTA_EXHAUSTED,
    "serverOverloaded": FailureKind.PROVIDER_OVERLOADED,
    "flexUnavailable": FailureKind.PROVIDER_OVERLOADED,
    "policyCapacityUnavailable": FailureKind.PROVIDER_OVERLOADED,
    "internalServerError": FailureKind.PROVIDER_ERROR,
    "modelNotFound": FailureKind.CONFIG_ERROR,
}
# codexErrorInfo given as {variant: {httpStatusCode}} when there is no status to go by.
_VARIANT_KINDS = {
    "httpConnectionFailed": FailureKind.NETWORK_ERROR,
    "responseStreamConnectionFailed": FailureKind.NETWORK_ERROR,
    "responseStreamDisconnected": FailureKind.STREAM_ERROR,
}
_TEXT_KINDS: TextKinds = [
    (
        re.compile(r"stream closed before|stream disconnected|idle timeout|malformed", re.I),
        FailureKind.STREAM_ERROR,
    ),
    (
        re.compile(r"waiting for network|error sending request|connection refused|timed out", re.I),
        FailureKind.NETWORK_ERROR,
    ),
    (
        re.compile(r"Missing environment variable|unknown model|model .* not found", re.I),
        FailureKind.CONFIG_ERROR,
    ),
    (re.compile(r"high demand|overloaded", re.I), FailureKind.PROVIDER_OVERLOADED),
    (re.compile(r"quota|usage limit", re.I), FailureKind.QUOTA_EXHAUSTED),
    (re.compile(r"rate limit|\b429\b", re.I), FailureKind.RATE_LIMITED),
    (re.compile(r"Unauthorized|\b401\b|API key", re.I), FailureKind.AUTH_FAILED),
]
_ATTEMPT = re.compile(r"(\d+)/\d+")


def error_info(error: dict[str, Any] | None) -> tuple[str | None, int | None]:
    """(codexErrorInfo variant name, its httpStatusCode) of a TurnError."""
    info = (error or {}).get("codexErrorInfo")
    if isinstance(info, str):
        return info, None
    if isinstance(info, dict) and info:
        variant, detail = next(iter(info.items()))
        status = detail.get("httpStatusCode") if isinstance(detail, dict) else None
        return variant, status if isinstance(status, int) else None
    return None, None


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class CodexOptions(HttpRuntimeOptions):
    engine: Literal["codex"]


class CodexEngine:
    name = "codex"

    def __init__(self) -> None:
        self.plan: ExecutionPlan | None = None
        self.prompt = ""
        self.thread_id: str | None = None
        self.turn_id: str | None = None
        self.next_id = 0
        self.pending: dict[int, str] = {}  # request id -> method, for our requests
        self.queued_steers: list[str] = []  # steers that arrived before the turn started
        self.answer = ""
        self.usage: dict[str, float] = {}  # the running turn's, from the thread's totals
        self._turn_base: dict[str, float] | None = None  # the thread's totals before the turn

    # -- launch -------------------------------------------------------------------------------

    def launch(
        self, plan: ExecutionPlan, secrets: dict[str, str], worker: WorkerMcp, scratch: Path
    ) -> LaunchSpec:
        self.plan = plan
        rc = plan.runtime_config
        assert isinstance(rc, HttpRuntimeOptions)
        codex_home = Path(plan.engine_home) / ".codex"
        codex_home.mkdir(mode=0o700, parents=True, exist_ok=True)  # Codex refuses a missing one
        secret = single_secret(secrets)
        provider: dict[str, Any] = {
            "name": "agent-run",
            "base_url": rc.base_url or DEFAULT_BASE_URL,
            "wire_api": "responses",
        }
        native = is_native(rc.auth)
        if secret is not None:
            provider["env_key"] = KEY_VARIABLE
        elif native:  # the linked auth.json: its API key, or its ChatGPT tokens
            provider["requires_openai_auth"] = True
        if rc.max_retries is not None:
            provider["request_max_retries"] = provider["stream_max_retries"] = rc.max_retries
        if rc.request_timeout_seconds is not None:
            provider["stream_idle_timeout_ms"] = int(rc.request_timeout_seconds * 1000)
        server = {
            "command": worker.command,
            "args": worker.args,
            "env": worker.env,
            "required": True,
            "default_tools_approval_mode": "approve",
        }
        # Shell commands the model runs inherit Codex's environment: never the key.
        shell_env = {"inherit": "all", "ignore_default_excludes": False, "exclude": [KEY_VARIABLE]}
        config = {
            "model": plan.model,
            "model_provider": PROVIDER,
            "shell_environment_policy": shell_env,
            "model_providers": {PROVIDER: provider},
            "mcp_servers": {worker.name: server},
        }
        if native and not rc.base_url:
            # Codex's own provider picks the endpoint by the sign-in's mode (API or ChatGPT).
            config["model_provider"] = "openai"
            del config["model_providers"]
        config_path = codex_home / "config.toml"
        write_private_file(config_path, tomli_w.dumps(config).encode(), durable=False)

        env = base_environment(plan)
        env.update(rc.env)
        env["CODEX_HOME"] = str(codex_home)
        if secret is not None:
            env[KEY_VARIABLE] = secret
        argv = [rc.binary or "codex", "app-server"]
        return LaunchSpec(
            argv=argv, env=env, cwd=plan.workdir, stdin_pipe=True, token_files=[config_path]
        )

    # -- the protocol -------------------------------------------------------------------------

    def _request(self, method: str, params: dict[str, Any]) -> bytes:
        self.next_id += 1
        self.pending[self.next_id] = method
        return _line({"id": self.next_id, "method": method, "params": params})

    def initial_input(self, plan: ExecutionPlan, prompt: str) -> list[bytes]:
        self.plan, self.prompt = plan, prompt
        return [self._request("initialize", {"clientInfo": {"name": "agent-run", "version": "1"}})]

    def _thread_params(self) -> dict[str, Any]:
        plan = self.plan
        assert plan is not None
        # Inside agent-run's bubblewrap sandbox the workdir is already read-only under
        # read_only, and Codex's own nested bwrap helper cannot start there (`execvp
        # codex-linux-sandbox`): ours enforces the profile (docs/engines.md).
        own_sandbox = plan.profile == "read_only" and plan.runtime_config.sandbox == "none"
        sandbox = "read-only" if own_sandbox else "danger-full-access"
        params: dict[str, Any] = {
            "model": plan.model,
            "cwd": plan.workdir,
            "approvalPolicy": "never",
            "sandbox": sandbox,
        }
        if plan.resume_session_id:
            params.update(threadId=plan.resume_session_id, excludeTurns=True)
        return params

    def _text_input(self, text: str) -> list[dict[str, str]]:
        return [{"type": "text", "text": text}]

    def parse_line(self, line: str) -> list[EngineEvent]:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return [Unparsed(line)]
        if not isinstance(msg, dict):
            return [Unparsed(line)]
        if "method" in msg and "id" in msg:
            return [SendInput(self._answer_request(msg["id"], msg["method"]))]
        if "id" in msg:
            return self._on_response(msg)
        if "method" in msg:
            return self._on_notification(msg["method"], msg.get("params") or {})
        return [Unparsed(line)]

    def _on_response(self, msg: dict[str, Any]) -> list[EngineEvent]:
        method = self.pending.pop(msg["id"], None) if isinstance(msg["id"], int) else None
        if "error" in msg:
            error = (
                msg["error"] if isinstance(msg["error"], dict) else {"message": str(msg["error"])}
            )
            if method == "turn/steer":  # the turn ended as the steer arrived: keep a record
                return [EngineNote("steer_refused", {"error": error})]
            if method in ("initialize", "thread/start", "thread/resume", "turn/start"):
                # No turn will run: end the execution with this error.
                return [
                    Completion(
                        text=f"{method} failed: {error.get('message', '')}",
                        is_error=True,
                        subtype="rpc_error",
                    )
                ]
            return [EngineNote("rpc_error", {"method": method, "error": error})]
        result = msg.get("result") or {}
        if method == "initialize":
            thread_method = (
                "thread/resume" if self.plan and self.plan.resume_session_id else "thread/start"
            )
            return [
                SendInput(
                    _line({"method": "initialized"})
                    + self._request(thread_method, self._thread_params())
                )
            ]
        if method in ("thread/start", "thread/resume"):
            self.thread_id = (result.get("thread") or {}).get("id")
            echoed = {
                key: result.get(key)
                for key in ("model", "modelProvider", "cwd", "approvalPolicy", "sandbox")
            }
            assert self.plan is not None
            start = self._request(
                "turn/start", {"threadId": self.thread_id, "input": self._text_input(self.prompt)}
            )
            return [
                SessionStarted(self.thread_id, result.get("model")),
                EngineNote("thread_settings", echoed),
                SendInput(start),
            ]
        return []

    def _answer_request(self, request_id: Any, method: str) -> bytes:
        """Codex asks us (approvals, user input): answer by profile, never leave it waiting."""
        allow = self.plan is not None and self.plan.profile == "write"
        if method in ("item/commandExecution/requestApproval", "item/fileChange/requestApproval"):
            result: dict[str, Any] = {"decision": "accept" if allow else "decline"}
        elif method in ("execCommandApproval", "applyPatchApproval"):
            result = {"decision": "approved" if allow else "denied"}
        elif method == "mcpServer/elicitation/request":
            result = {"action": "decline"}
        elif method == "item/tool/requestUserInput":
            result = {"answers": {}}
        else:
            return _line(
                {
                    "id": request_id,
                    "error": {"code": -32601, "message": f"{method} is not supported"},
                }
            )
        return _line({"id": request_id, "result": result})

    def _on_notification(self, method: str, params: dict[str, Any]) -> list[EngineEvent]:
        if method == "turn/started":
            self.turn_id = (params.get("turn") or {}).get("id")
            self.answer, self.usage, self._turn_base = "", {}, None
            steers, self.queued_steers = self.queued_steers, []
            return [SendInput(self._steer_request(text)) for text in steers]
        if method == "item/started":
            return _item_started(params.get("item") or {})
        if method == "item/completed":
            item = params.get("item") or {}
            if item.get("type") == "agentMessage" and item.get("text"):
                self.answer = item["text"]
            return _item_completed(item)
        if method == "thread/tokenUsage/updated":
            return self._on_token_usage(params.get("tokenUsage") or {})
        if method == "account/rateLimits/updated":  # quota windows (docs/capacity.md)
            credits = reset_credits(params.get("rateLimitResetCredits"))  # not sent by 0.171.0
            windows = with_credits(codex_windows(params.get("rateLimits")), credits)
            return [QuotaEvent(windows)] if windows else []
        if method == "error":
            error = params.get("error") or {}
            variant, status = error_info(error)
            if params.get("willRetry"):
                message = (
                    f"{error.get('message', '')} ({variant}) {error.get('additionalDetails') or ''}"
                )
                attempt = _ATTEMPT.search(message)
                return [
                    RetryEvent(status, int(attempt.group(1)) if attempt else None, message.strip())
                ]
            return [
                EngineNote(
                    "engine_error",
                    {
                        "message": error.get("message"),
                        "codex_error_info": variant,
                        "http_status": status,
                    },
                )
            ]
        if method == "turn/completed":
            return [self._completion(params.get("turn") or {})]
        if method in ("configWarning", "deprecationNotice", "warning"):
            return [EngineNote("engine_warning", {"method": method, **params})]
        return []

    def _on_token_usage(self, token_usage: dict[str, Any]) -> list[EngineEvent]:
        """The turn's usage so far: the thread's `total` less its total before the turn (the
        first update's total less its `last` call), so an update Codex repeats (it re-sends
        the counts with new rate limits) is never counted twice."""
        total, last = _counts(token_usage.get("total")), _counts(token_usage.get("last"))
        if not total:  # no totals: add up the calls (each update, one new call)
            for key, value in last.items():
                self.usage[key] = self.usage.get(key, 0) + value
            return [UsageUpdate(dict(self.usage))] if last else []
        if self._turn_base is None:
            self._turn_base = {key: value - last.get(key, 0) for key, value in total.items()}
        base = self._turn_base
        self.usage = {key: max(0, value - base.get(key, 0)) for key, value in total.items()}
        return [UsageUpdate(dict(self.usage))]

    def _completion(self, turn: dict[str, Any]) -> Completion:
        status = turn.get("status")
        self.turn_id = None
        usage = self.usage or None
        if status == "completed":
            return Completion(text=self.answer, is_error=False, subtype="completed", usage=usage)
        error = turn.get("error") or {}
        variant, http_status = error_info(error)
        text = error.get("message") or f"turn {status}"
        return Completion(
            text=text,
            is_error=True,
            error_status=http_status,
            subtype=variant or str(status),
            usage=usage,
        )

    # -- steer, interrupt, classify -------------------------------------------------------

    def _steer_request(self, text: str) -> bytes:
        return self._request(
            "turn/steer",
            {
                "threadId": self.thread_id,
                "expectedTurnId": self.turn_id,
                "input": self._text_input(text),
            },
        )

    def steer_input(self, text: str) -> bytes | None:
        if self.turn_id is None:  # the turn has not started yet: send it once it has
            self.queued_steers.append(text)
            return b""
        return self._steer_request(text)

    def interrupt_input(self) -> bytes | None:
        if self.thread_id is None or self.turn_id is None:
            return None  # nothing running to interrupt: the supervisor terminates the group
        return self._request("turn/interrupt", {"threadId": self.thread_id, "turnId": self.turn_id})

    def classify(self, completion: Completion) -> FailureKind | None:
        if not completion.is_error:
            return None
        variant = completion.subtype
        return (
            kind_for_http_status(completion.error_status, completion.text)
            or _INFO_KINDS.get(variant or "")
            or kind_from_text(completion.text, _TEXT_KINDS)
            or _VARIANT_KINDS.get(variant or "")
            or FailureKind.ERROR_REPLY
        )


def _counts(usage: Any) -> dict[str, float]:
    """A Codex token-usage breakdown in snake case: `inputTokens` -> `input_tokens`, ..."""
    if not isinstance(usage, dict):
        return {}
    return {
        _snake(key): value
        for key, value in usage.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _item_started(item: dict[str, Any]) -> list[EngineEvent]:
    kind = item.get("type")
    if kind == "commandExecution":
        return [
            MessageEvent(
                "tool_call",
                json.dumps({"command": item.get("command"), "cwd": item.get("cwd")}),
                name="exec_command",
            )
        ]
    if kind == "fileChange":
        changes = [
            {"path": c.get("path"), "kind": (c.get("kind") or {}).get("type")}
            for c in item.get("changes") or []
        ]
        return [MessageEvent("tool_call", json.dumps({"changes": changes}), name="apply_patch")]
    if kind == "mcpToolCall":
        return [
            MessageEvent(
                "tool_call",
                json.dumps(item.get("arguments")),
                name=f"mcp__{item.get('server')}__{item.get('tool')}",
            )
        ]
    return []


def _item_completed(item: dict[str, Any]) -> list[EngineEvent]:
    kind = item.get("type")
    if kind == "agentMessage" and item.get("text"):
        return [MessageEvent("assistant", item["text"])]
    if kind == "commandExecution":
        output = item.get("aggregatedOutput") or ""
        code = item.get("exitCode")
        return [
            MessageEvent(
                "tool",
                f"{output}\n[exit {code}]",
                name=item.get("id"),
                is_error=code not in (0, None) or item.get("status") in ("failed", "declined"),
            )
        ]
    if kind == "fileChange":
        return [
            MessageEvent(
                "tool",
                str(item.get("status")),
                name=item.get("id"),
                is_error=item.get("status") in ("failed", "declined"),
            )
        ]
    if kind == "mcpToolCall":
        result = item.get("result") or {}
        parts = [str(p.get("text", "")) for p in result.get("content") or [] if isinstance(p, dict)]
        error = item.get("error")
        text = "\n".join(parts) if not error else f"error: {error}"
        return [MessageEvent("tool", text, name=item.get("id"), is_error=bool(error))]
    return []


def _credential(data: dict[str, Any]) -> Credential:
    """`auth.json`: `{"auth_mode": "apikey", "OPENAI_API_KEY": ...}` or ChatGPT tokens."""
    key = data.get("OPENAI_API_KEY")
    found = data.get("tokens")
    tokens: dict[str, Any] = found if isinstance(found, dict) else {}
    secrets = token_strings(
        [key, tokens.get("id_token"), tokens.get("access_token"), tokens.get("refresh_token")]
    )
    if isinstance(key, str) and key:
        return Credential("apikey", secrets, usable=True)
    return Credential(
        str(data.get("auth_mode") or "chatgpt"),
        secrets,
        usable=bool(tokens.get("refresh_token")),
        expires_at=jwt_expiry(tokens.get("access_token")),
    )


def _email(data: dict[str, Any]) -> Any:
    """The id_token's email (or its OpenAI profile's)."""
    tokens = data.get("tokens")
    claims = jwt_claims(tokens.get("id_token") if isinstance(tokens, dict) else None)
    profile = claims.get("https://api.openai.com/profile")
    return claims.get("email") or (profile.get("email") if isinstance(profile, dict) else None)


# Checked against codex 0.171.0: the file is linked into the generated `$CODEX_HOME`. Codex
# resolves the link before it writes: its temp file, rename and `auth.json.lock` are all in the
# real file's folder, so the link survives its writes and its own lock serialises refreshes
# between agents.
SIGN_IN = SignIn(
    "codex",
    "Codex",
    "CODEX_HOME",
    "~/.codex",
    "auth.json",
    ".codex",
    ("login",),
    _credential,
    key_variable="OPENAI_API_KEY",
    key_flag="--with-api-key",
    email_sources=(("auth.json", _email),),
)

SPEC = EngineSpec(
    name="codex",
    factory=CodexEngine,
    options=CodexOptions,
    summary="OpenAI Codex CLI (`codex app-server`, JSON-RPC)",
    default_binary="codex",
    config_example={"engine": "codex", "models": ["gpt-5-codex"], "auth": {"login": "native"}},
    steer_opens_turn=False,  # turn/steer joins the running turn
    broker_upstream=DEFAULT_BASE_URL,
    sign_in=SIGN_IN,
)
