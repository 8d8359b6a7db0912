"""config.toml: fail-closed loading (dotted field paths in every error) and the `init` template."""

import shutil
import tomllib
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from agent_run.domain.errors import ConfigInvalid
from agent_run.home import Home, write_private_file

SCHEMA_VERSION = 1
ENGINE_NAMES = ("demo", "codex", "claude", "glm", "qwen")
EngineName = Literal["demo", "codex", "claude", "glm", "qwen"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AuthConfig(StrictModel):
    """Where a secret comes from: the name of a variable, a file, or the engine's own sign-in
    (`login = "native"`, engines/signin.py). Never the value itself."""

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: str | None = None
    login: Literal["native"] | None = None
    dir: str | None = Field(default=None, description="native login: the engine's folder "
                            "holding its credential (default ~/.codex, ~/.claude)")

    @model_validator(mode="after")
    def _one_source(self) -> "AuthConfig":
        if sum(source is not None for source in (self.env, self.file, self.login)) != 1:
            raise ValueError("give exactly one of `env` (a variable name), `file` (a path) "
                             'or `login = "native"` (the engine\'s own sign-in)')
        if self.dir is not None and self.login is None:
            raise PydanticCustomError(f"{_FIELD_ERROR}dir", '`dir` goes with `login = "native"` only')
        return self


# Engines with no native sign-in agent-run can use, and why (engines/signin.py has the others).
NATIVE_LOGIN_REFUSED = {
    "qwen": "Qwen OAuth was discontinued on 2026-04-15 (Qwen Code 0.24.4 no longer offers it): "
            "use an API key (auth.env or auth.file)",
    "glm": "GLM has no native sign-in: use an API key (auth.env or auth.file)",
    "demo": "the demo engine needs no sign-in",
}
_LOOPBACK_HOSTS = ("localhost", "::1")
# Variables a runtime's `env` may not set: agent-run owns them (homes, endpoints, credentials).
_RESERVED_ENV_PREFIXES = ("ANTHROPIC_", "OPENAI_", "CODEX_", "CLAUDE_CONFIG_DIR", "CLAUDE_SECURESTORAGE_",
                          "QWEN_HOME", "HOME", "AGENT_RUN_")


def _is_loopback(host: str) -> bool:
    return host in _LOOPBACK_HOSTS or host.startswith("127.")


class RuntimeConfig(StrictModel):
    engine: EngineName
    enabled: bool = True
    binary: str | None = None
    models: list[str] = Field(default_factory=list)
    default_model: str | None = None
    auth: AuthConfig | None = None
    base_url: str | None = None
    allow_plain_http_loopback: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    stall_seconds: float | None = Field(default=None, gt=0)
    wall_seconds: float | None = Field(default=None, gt=0)
    max_retries: int | None = Field(default=None, ge=0, le=20,
                                    description="the engine's own request retries")
    request_timeout_seconds: float | None = Field(default=None, gt=0,
                                                  description="the engine's own per-request timeout")
    retry_give_up_seconds: float = Field(default=120.0, gt=0,
                                         description="stop an engine that only retries for this long")

    @field_validator("base_url")
    @classmethod
    def _https_or_loopback(cls, value: str | None) -> str | None:
        if value is None:
            return None
        url = urlsplit(value)
        if url.hostname and (url.scheme == "https" or (url.scheme == "http" and _is_loopback(url.hostname))):
            return value.rstrip("/")
        raise ValueError("must be https://..., or http:// to a loopback address")

    @model_validator(mode="after")
    def _default_model_is_offered(self) -> "RuntimeConfig":
        if self.default_model is not None and self.models and self.default_model not in self.models:
            raise PydanticCustomError(f"{_FIELD_ERROR}default_model",
                                      "default_model must be one of `models`")
        return self

    @model_validator(mode="after")
    def _native_login_is_supported(self) -> "RuntimeConfig":
        if self.auth is not None and self.auth.login is not None and self.engine in NATIVE_LOGIN_REFUSED:
            raise PydanticCustomError(f"{_FIELD_ERROR}auth.login", NATIVE_LOGIN_REFUSED[self.engine])
        return self

    @model_validator(mode="after")
    def _plain_http_only_when_allowed(self) -> "RuntimeConfig":
        if self.base_url and self.base_url.startswith("http://") and not self.allow_plain_http_loopback:
            raise PydanticCustomError(f"{_FIELD_ERROR}base_url", "plain http needs `allow_plain_http_loopback = true`")
        return self

    @field_validator("env")
    @classmethod
    def _no_reserved_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name.startswith(_RESERVED_ENV_PREFIXES):
                raise ValueError(f"{name} is set by agent-run itself; use base_url / auth")
        return value


class SupervisorConfig(StrictModel):
    stall_seconds: float = Field(default=600.0, gt=0)
    wall_seconds: float | None = Field(default=None, gt=0)
    cancel_grace_seconds: float = Field(default=5.0, ge=0)
    storage_buffer_bytes: int = Field(default=4 * 1024 * 1024, ge=4096,
                                      description="events held in memory while the disk is full")
    storage_wait_seconds: float = Field(default=600.0, ge=0,
                                        description="how long a finished run waits for disk space")


class DaemonConfig(StrictModel):
    reconcile_interval_seconds: float = Field(default=2.0, gt=0)
    answer_scrub_seconds: float = Field(default=3600.0, gt=0,
                                        description="each sealed answer is re-hashed once per this period")


class WebConfig(StrictModel):
    roots: list[str] = Field(default_factory=list,
                             description="folders the web UI's picker may show (default: $HOME); never /")

    @field_validator("roots")
    @classmethod
    def _absolute_and_not_the_filesystem_root(cls, value: list[str]) -> list[str]:
        for root in value:
            path = Path(root).expanduser()
            if not path.is_absolute():
                raise ValueError(f"{root} is not an absolute path")
            if path.resolve() == Path("/"):
                raise ValueError("/ cannot be a root: name the folders that hold your projects")
        return value


def _default_runtimes() -> dict[str, RuntimeConfig]:
    return {"demo": RuntimeConfig(engine="demo", models=["demo-1"], default_model="demo-1")}


class Config(StrictModel):
    schema_version: Literal[1]
    default_runtime: str = "demo"
    supervisor: SupervisorConfig = Field(default_factory=SupervisorConfig)
    daemon: DaemonConfig = Field(default_factory=DaemonConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    runtimes: dict[str, RuntimeConfig] = Field(default_factory=_default_runtimes)

    @model_validator(mode="after")
    def _default_runtime_exists(self) -> "Config":
        runtime = self.runtimes.get(self.default_runtime)
        if runtime is None:
            raise ValueError(f"default_runtime {self.default_runtime!r} is not a configured runtime")
        if not runtime.enabled:
            raise ValueError(f"default_runtime {self.default_runtime!r} is disabled")
        return self


def default_config() -> Config:
    return Config(schema_version=SCHEMA_VERSION)


# A model-level check names the field it is about in its error type: "field:NAME".
_FIELD_ERROR = "field:"


def _dotted(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "<root>"


def parse_config(text: str, source: str = "config.toml") -> Config:
    """Parse and validate config text; raise ConfigInvalid naming the dotted path of the field."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigInvalid(f"{source}: not valid TOML: {exc}") from None
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        if first["type"] == "value_error" and loc == ():
            # the top-level validator is about default_runtime
            field = "default_runtime"
        elif first["type"].startswith(_FIELD_ERROR):
            field = _dotted((*loc, first["type"].removeprefix(_FIELD_ERROR)))
        else:
            field = _dotted(loc)
        if first["type"] == "extra_forbidden":
            message = f"{source}: unknown key `{field}`"
        elif first["type"] == "missing":
            message = f"{source}: missing required key `{field}`"
        else:
            message = f"{source}: `{field}`: {first['msg']}"
        raise ConfigInvalid(message, field=field) from None


def load_config(home: Home) -> Config:
    """The home's config, or the built-in defaults (demo runtime) when there is no file."""
    if not home.config_path.exists():
        return default_config()
    return parse_config(home.config_path.read_text(), str(home.config_path))


_ENGINE_BINARIES = {"codex": "codex", "claude": "claude", "glm": "claude", "qwen": "qwen"}
_ENGINE_EXAMPLES = {
    "codex": {"engine": "codex", "models": ["gpt-5-codex"], "auth": {"login": "native"}},
    "claude": {"engine": "claude", "models": ["claude-sonnet-4-5"], "auth": {"login": "native"}},
    "glm": {
        "engine": "glm",
        "models": ["glm-4.6"],
        "base_url": "https://api.z.ai/api/anthropic",
        "auth": {"env": "ZAI_API_KEY"},
    },
    "qwen": {"engine": "qwen", "models": ["qwen3-coder-plus"], "auth": {"env": "DASHSCOPE_API_KEY"}},
}

# Native-login examples: the variable an API key would come from instead.
_API_KEY_VARIABLES = {"codex": "OPENAI_API_KEY", "claude": "ANTHROPIC_API_KEY"}


def render_init_config(found_binaries: dict[str, str]) -> str:
    """A commented config.toml: demo enabled, a commented block per engine found on PATH."""
    lines = [
        "# agent-run configuration. Loading is fail-closed: unknown keys are refused.",
        "# Secrets never go here: `auth` names a variable (env), a file, or the engine's own",
        '# sign-in (login = "native"), never a value.',
        f"schema_version = {SCHEMA_VERSION}",
        'default_runtime = "demo"',
        "",
        "[supervisor]",
        "# Fail an execution whose engine is silent this long.",
        "stall_seconds = 600.0",
        "# Seconds to wait after an interrupt before TERM, then KILL, of the engine group.",
        "cancel_grace_seconds = 5.0",
        "# While the disk is full, hold up to this many bytes of a run's events in memory.",
        "# storage_buffer_bytes = 4194304",
        "",
        "# `agent-run web`: the folder picker shows only folders under these roots (default: $HOME).",
        "# [web]",
        '# roots = ["~/src"]',
        "",
        "# The offline demo engine: pure Python, no network. The quick start uses it.",
        "[runtimes.demo]",
        'engine = "demo"',
        'models = ["demo-1"]',
        'default_model = "demo-1"',
    ]
    for name, example in _ENGINE_EXAMPLES.items():
        binary = found_binaries.get(_ENGINE_BINARIES[name])
        if binary is None:
            continue
        block = tomli_w.dumps({"runtimes": {name: {**example, "binary": binary}}})
        lines += ["", f"# {name}: found {binary}; uncomment to enable."]
        if name in _API_KEY_VARIABLES:
            lines += [f"# It runs on your own sign-in (`agent-run login {name}`; SECURITY.md); for an",
                      f'# API key instead: auth = {{ env = "{_API_KEY_VARIABLES[name]}" }}']
        lines += [f"# {line}" if line else "#" for line in block.strip().splitlines()]
    return "\n".join(lines) + "\n"


def find_engine_binaries() -> dict[str, str]:
    found = {}
    for binary in sorted(set(_ENGINE_BINARIES.values())):
        path = shutil.which(binary)
        if path:
            found[binary] = path
    return found


def init_config(home: Home, *, force: bool = False) -> Path:
    """Write the commented config; refuse to overwrite unless forced. Validates before writing."""
    home.ensure()
    if home.config_path.exists() and not force:
        raise ConfigInvalid(f"{home.config_path} exists; pass --force to overwrite", field="config")
    text = render_init_config(find_engine_binaries())
    parse_config(text)
    write_private_file(home.config_path, text.encode())
    return home.config_path
