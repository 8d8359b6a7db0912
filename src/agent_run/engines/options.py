"""Runtime options: the keys of a `[runtimes.NAME]` table, common to every engine or per engine.

Each engine declares its own options model (a subclass of `RuntimeOptions` or
`HttpRuntimeOptions` with `engine: Literal["name"]`); config.toml and the execution plan are
validated against the model of the runtime's engine, so a key the engine does not take is an
unknown key. Loading is fail-closed: extra keys are refused, values are strict.
"""

import os
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

# A model-level check names the field it is about in its error type: "field:NAME".
FIELD_ERROR = "field:"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AuthConfig(StrictModel):
    """Where a secret comes from: the name of a variable, a file, or the engine's own sign-in
    (`login = "native"`, engines/signin.py). Never the value itself."""

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: str | None = None
    login: Literal["native"] | None = None
    dir: str | None = Field(
        default=None,
        description="native login: the engine's folder "
        "holding its credential (default ~/.codex, ~/.claude)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> "AuthConfig":
        if sum(source is not None for source in (self.env, self.file, self.login)) != 1:
            raise ValueError(
                "give exactly one of `env` (a variable name), `file` (a path) "
                'or `login = "native"` (the engine\'s own sign-in)'
            )
        if self.dir is not None and self.login is None:
            raise PydanticCustomError(
                f"{FIELD_ERROR}dir", '`dir` goes with `login = "native"` only'
            )
        return self


def auth_file_too_open(file: str) -> str | None:
    """Why a key file may not be used (group or others can read it), or None. Judged when the
    config is loaded and again when an agent reads it (not in stored plans: they keep loading);
    a file not there yet is judged when an agent reads it."""
    path = os.path.expanduser(file)
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return None
    if mode & 0o077:
        return f"{path} is readable by group or others (mode {mode:o}): chmod 600 {path}"
    return None


# --- capacity (docs/capacity.md): where a runtime's quota readings come from, and its weights
LimitsSource = Literal["native", "codex_appserver", "command", "none"]
Weight = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # strict: a bool is refused
AccountLabel = Annotated[str, Field(pattern=r"^[a-z0-9_-]{1,32}$")]
LaneName = Annotated[str, Field(min_length=1, max_length=200)]
# --- end capacity
ACCOUNT_LABEL = r"^[a-z0-9_-]{1,32}$"


class AccountConfig(StrictModel):
    """One account of a runtime (`[runtimes.NAME.accounts.LABEL]`): its own credential. A native
    sign-in without `dir` lives in `<home>/accounts/<runtime>/<label>/` (engines/accounts.py)."""

    auth: AuthConfig


_LOOPBACK_HOSTS = ("localhost", "::1")
# Variables a runtime's `env` may not set: agent-run owns them (homes, endpoints, credentials).
_RESERVED_ENV_PREFIXES = (
    "ANTHROPIC_",
    "OPENAI_",
    "CODEX_",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_SECURESTORAGE_",
    "QWEN_HOME",
    "HOME",
    "AGENT_RUN_",
)


def _is_loopback(host: str) -> bool:
    return host in _LOOPBACK_HOSTS or host.startswith("127.")


class RuntimeOptions(StrictModel):
    """The keys every runtime takes, whatever its engine."""

    engine: str
    enabled: bool = True
    binary: str | None = None
    models: list[str] = Field(default_factory=list)
    default_model: str | None = None
    auth: AuthConfig | None = None
    accounts: dict[str, AccountConfig] = Field(
        default_factory=dict, description="named accounts, each with its own `auth`"
    )
    default_account: str | None = Field(
        default=None, description="the account a run uses when it names none"
    )
    env: dict[str, str] = Field(default_factory=dict)
    stall_seconds: float | None = Field(default=None, gt=0)
    wall_seconds: float | None = Field(default=None, gt=0)
    retry_give_up_seconds: float = Field(
        default=120.0, gt=0, description="stop an engine that only retries for this long"
    )
    sandbox: Literal["bubblewrap", "none"] = Field(
        default="bubblewrap",
        description="bubblewrap: the engine sees only what its agent may touch (SECURITY.md); "
        "none: it sees everything the user can",
    )
    # --- capacity (docs/capacity.md)
    limits_source: LimitsSource = "native"
    priority_multiplier: Weight = 1.0
    priority_account_multipliers: dict[AccountLabel, Weight] = Field(default_factory=dict)
    priority_lane_multipliers: dict[LaneName, Weight] = Field(default_factory=dict)
    model_lanes: dict[str, LaneName] = Field(
        default_factory=dict,
        description="model -> the model-specific quota lane it spends besides the account-wide "
        "one (docs/capacity.md)",
    )

    @model_validator(mode="after")
    def _model_lanes_name_models(self) -> "RuntimeOptions":
        for model in self.model_lanes:
            if self.models and model not in self.models:
                raise PydanticCustomError(
                    f"{FIELD_ERROR}model_lanes.{model}",
                    "model_lanes names a model that is not one of `models`",
                )
        return self

    @model_validator(mode="after")
    def _appserver_is_codex(self) -> "RuntimeOptions":
        if self.limits_source == "codex_appserver" and self.engine != "codex":
            raise PydanticCustomError(
                f"{FIELD_ERROR}limits_source",
                "codex_appserver reads Codex's own limits: only for engine codex",
            )
        return self

    # --- end capacity

    @model_validator(mode="after")
    def _default_model_is_offered(self) -> "RuntimeOptions":
        if self.default_model is not None and self.models and self.default_model not in self.models:
            raise PydanticCustomError(
                f"{FIELD_ERROR}default_model", "default_model must be one of `models`"
            )
        return self

    @model_validator(mode="after")
    def _native_login_is_supported(self) -> "RuntimeOptions":
        from agent_run.engines.registry import native_login_refusal  # the registry imports us

        if self.auth is not None and self.auth.login is not None:
            refusal = native_login_refusal(self.engine)
            if refusal is not None:
                raise PydanticCustomError(f"{FIELD_ERROR}auth.login", refusal)
        return self

    @model_validator(mode="after")
    def _accounts_are_labelled(self) -> "RuntimeOptions":
        from agent_run.engines.registry import native_login_refusal  # the registry imports us

        for label, account in self.accounts.items():
            if not re.match(ACCOUNT_LABEL, label):
                raise PydanticCustomError(
                    f"{FIELD_ERROR}accounts.{label}",
                    "an account label is 1-32 of a-z, 0-9, `_` and `-`",
                )
            if account.auth.login is not None:
                refusal = native_login_refusal(self.engine)
                if refusal is not None:
                    raise PydanticCustomError(f"{FIELD_ERROR}accounts.{label}.auth.login", refusal)
        for label in self.priority_account_multipliers:
            if label not in self.accounts:
                raise PydanticCustomError(
                    f"{FIELD_ERROR}priority_account_multipliers.{label}",
                    "names no account of this runtime: "
                    + (", ".join(sorted(self.accounts)) or "none is configured"),
                )
        if self.default_account is not None and self.default_account not in self.accounts:
            raise PydanticCustomError(
                f"{FIELD_ERROR}default_account",
                "default_account must be one of `accounts`: "
                + (", ".join(sorted(self.accounts)) or "none is configured"),
            )
        return self

    @field_validator("env")
    @classmethod
    def _no_reserved_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name.startswith(_RESERVED_ENV_PREFIXES):
                raise ValueError(f"{name} is set by agent-run itself; use base_url / auth")
        return value


class HttpRuntimeOptions(RuntimeOptions):
    """The keys of an engine that calls a model provider over HTTP itself."""

    base_url: str | None = None
    allow_plain_http_loopback: bool = False
    max_retries: int | None = Field(
        default=None, ge=0, le=20, description="the engine's own request retries"
    )
    request_timeout_seconds: float | None = Field(
        default=None, gt=0, description="the engine's own per-request timeout"
    )

    @field_validator("base_url")
    @classmethod
    def _https_or_loopback(cls, value: str | None) -> str | None:
        if value is None:
            return None
        url = urlsplit(value)
        if url.hostname and (
            url.scheme == "https" or (url.scheme == "http" and _is_loopback(url.hostname))
        ):
            return value.rstrip("/")
        raise ValueError("must be https://..., or http:// to a loopback address")

    @model_validator(mode="after")
    def _plain_http_only_when_allowed(self) -> "HttpRuntimeOptions":
        if (
            self.base_url
            and self.base_url.startswith("http://")
            and not self.allow_plain_http_loopback
        ):
            raise PydanticCustomError(
                f"{FIELD_ERROR}base_url", "plain http needs `allow_plain_http_loopback = true`"
            )
        return self
