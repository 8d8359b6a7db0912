"""config.toml: fail-closed loading (dotted field paths in every error) and the `init` template."""

import shutil
import tomllib
from pathlib import Path
from typing import Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent_run.domain.errors import ConfigInvalid
from agent_run.home import Home, write_private_file

SCHEMA_VERSION = 1
ENGINE_NAMES = ("demo", "codex", "claude", "glm", "qwen")
EngineName = Literal["demo", "codex", "claude", "glm", "qwen"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AuthConfig(StrictModel):
    """Where a secret comes from: the name of a variable, or a file. Never the value itself."""

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "AuthConfig":
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of `env` (a variable name) or `file` (a path)")
        return self


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


class SupervisorConfig(StrictModel):
    stall_seconds: float = Field(default=600.0, gt=0)
    wall_seconds: float | None = Field(default=None, gt=0)
    cancel_grace_seconds: float = Field(default=5.0, ge=0)


class DaemonConfig(StrictModel):
    reconcile_interval_seconds: float = Field(default=2.0, gt=0)


def _default_runtimes() -> dict[str, RuntimeConfig]:
    return {"demo": RuntimeConfig(engine="demo", models=["demo-1"], default_model="demo-1")}


class Config(StrictModel):
    schema_version: Literal[1]
    default_runtime: str = "demo"
    supervisor: SupervisorConfig = Field(default_factory=SupervisorConfig)
    daemon: DaemonConfig = Field(default_factory=DaemonConfig)
    runtimes: dict[str, RuntimeConfig] = Field(default_factory=_default_runtimes)

    @model_validator(mode="after")
    def _default_runtime_exists(self) -> "Config":
        if self.default_runtime not in self.runtimes:
            raise ValueError(f"default_runtime {self.default_runtime!r} is not a configured runtime")
        return self


def default_config() -> Config:
    return Config(schema_version=SCHEMA_VERSION)


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
            # model-level validators: name the field they are about.
            field = "default_runtime"
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
    "codex": {"engine": "codex", "models": ["gpt-5-codex"], "auth": {"env": "OPENAI_API_KEY"}},
    "claude": {"engine": "claude", "models": ["claude-sonnet-4-5"], "auth": {"env": "ANTHROPIC_API_KEY"}},
    "glm": {
        "engine": "glm",
        "models": ["glm-4.6"],
        "base_url": "https://api.z.ai/api/anthropic",
        "auth": {"env": "ZAI_API_KEY"},
    },
    "qwen": {"engine": "qwen", "models": ["qwen3-coder-plus"], "auth": {"env": "DASHSCOPE_API_KEY"}},
}


def render_init_config(found_binaries: dict[str, str]) -> str:
    """A commented config.toml: demo enabled, a commented block per engine found on PATH."""
    lines = [
        "# agent-run configuration. Loading is fail-closed: unknown keys are refused.",
        "# Secrets never go here: `auth` names a variable (env) or a file, never a value.",
        f"schema_version = {SCHEMA_VERSION}",
        'default_runtime = "demo"',
        "",
        "[supervisor]",
        "# Fail an execution whose engine is silent this long.",
        "stall_seconds = 600.0",
        "# Seconds to wait after an interrupt before TERM, then KILL, of the engine group.",
        "cancel_grace_seconds = 5.0",
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
