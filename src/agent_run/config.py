"""config.toml: fail-closed loading (dotted field paths in every error) and the `init` template."""

import shutil
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import tomli_w
from pydantic import (
    Field,
    PlainValidator,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agent_run.domain.errors import ConfigInvalid
from agent_run.engines.options import FIELD_ERROR as _FIELD_ERROR
from agent_run.engines.options import AuthConfig, RuntimeOptions, StrictModel, auth_file_too_open
from agent_run.engines.registry import all_engine_specs, runtime_options
from agent_run.home import Home, write_private_file

__all__ = ["AuthConfig", "Config", "RuntimeConfig", "load_config", "parse_config"]

SCHEMA_VERSION = 1

# A `[runtimes.NAME]` table, validated against the options model of the engine it names.
RuntimeConfig = Annotated[SerializeAsAny[RuntimeOptions], PlainValidator(runtime_options)]


class SupervisorConfig(StrictModel):
    stall_seconds: float = Field(default=600.0, gt=0)
    wall_seconds: float | None = Field(default=None, gt=0)
    cancel_grace_seconds: float = Field(default=5.0, ge=0)
    storage_buffer_bytes: int = Field(
        default=4 * 1024 * 1024, ge=4096, description="events held in memory while the disk is full"
    )
    storage_wait_seconds: float = Field(
        default=600.0, ge=0, description="how long a finished run waits for disk space"
    )


class DaemonConfig(StrictModel):
    reconcile_interval_seconds: float = Field(default=2.0, gt=0)
    answer_scrub_seconds: float = Field(
        default=3600.0, gt=0, description="each sealed answer is re-hashed once per this period"
    )


class WebConfig(StrictModel):
    roots: list[str] = Field(
        default_factory=list,
        description="folders the web UI's picker may show (default: $HOME); never /",
    )

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


class CommandCollectorConfig(StrictModel):
    """`[capacity.command]`: the external collector of `limits_source = "command"` (docs/capacity.md)."""

    argv: list[str] = Field(min_length=1, description="the collector's argv (no shell)")
    deadline_seconds: float = Field(default=30.0, ge=1, le=300, allow_inf_nan=False)
    output_cap_bytes: int = Field(default=2 * 1024 * 1024, ge=1024, le=2 * 1024 * 1024)
    valid_seconds: float = Field(
        default=900.0,
        gt=0,
        le=86_400,
        allow_inf_nan=False,
        description="a window without valid_until is fresh this long",
    )


class CapacityConfig(StrictModel):
    """`[capacity]`: how often the daemon collects quota readings and how many it keeps."""

    collect_interval_seconds: float = Field(default=300.0, ge=1, allow_inf_nan=False)
    sample_retention: int = Field(default=1000, ge=1, le=1_000_000)
    command: CommandCollectorConfig | None = None


def _default_runtimes() -> dict[str, RuntimeOptions]:
    return {
        "demo": runtime_options({"engine": "demo", "models": ["demo-1"], "default_model": "demo-1"})
    }


class Config(StrictModel):
    schema_version: Literal[1]
    default_runtime: str = "demo"
    supervisor: SupervisorConfig = Field(default_factory=SupervisorConfig)
    daemon: DaemonConfig = Field(default_factory=DaemonConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)
    runtimes: dict[str, RuntimeConfig] = Field(default_factory=_default_runtimes)

    @model_validator(mode="after")
    def _default_runtime_exists(self) -> "Config":
        runtime = self.runtimes.get(self.default_runtime)
        if runtime is None:
            raise ValueError(
                f"default_runtime {self.default_runtime!r} is not a configured runtime"
            )
        if not runtime.enabled:
            raise ValueError(f"default_runtime {self.default_runtime!r} is disabled")
        return self

    @model_validator(mode="after")
    def _command_source_has_a_collector(self) -> "Config":
        for name, runtime in self.runtimes.items():
            if runtime.limits_source == "command" and self.capacity.command is None:
                raise PydanticCustomError(
                    f"{_FIELD_ERROR}runtimes.{name}.limits_source",
                    'limits_source = "command" needs [capacity.command] argv',
                )
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
        config = Config.model_validate(raw)
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
    for name, runtime in config.runtimes.items():
        if (
            runtime.auth is not None
            and runtime.auth.file
            and (why := auth_file_too_open(runtime.auth.file))
        ):
            raise ConfigInvalid(
                f"{source}: `runtimes.{name}.auth.file`: {why}", field=f"runtimes.{name}.auth.file"
            )
    return config


def load_config(home: Home) -> Config:
    """The home's config, or the built-in defaults (demo runtime) when there is no file."""
    if not home.config_path.exists():
        return default_config()
    return parse_config(home.config_path.read_text(), str(home.config_path))


# Native-login examples: the variable an API key would come from instead.
_API_KEY_VARIABLES = {"codex": "OPENAI_API_KEY", "claude": "ANTHROPIC_API_KEY"}


def render_init_config(found_binaries: dict[str, str], *, enable: bool = False) -> str:
    """A commented config.toml: demo enabled, a block per engine found on PATH (commented out,
    or with `enable` (`init --detect`) live)."""
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
    for spec in all_engine_specs():
        binary = found_binaries.get(spec.default_binary or "")
        if binary is None or not spec.config_example:
            continue
        name = spec.name
        block = tomli_w.dumps({"runtimes": {name: {**spec.config_example, "binary": binary}}})
        lines += ["", f"# {name}: found {binary}" + ("." if enable else "; uncomment to enable.")]
        if name in _API_KEY_VARIABLES:
            lines += [
                f"# It runs on your own sign-in (`agent-run login {name}`; SECURITY.md); for an",
                f'# API key instead: auth = {{ env = "{_API_KEY_VARIABLES[name]}" }}',
            ]
        lines += (
            block.strip().splitlines()
            if enable
            else [f"# {line}" if line else "#" for line in block.strip().splitlines()]
        )
    return "\n".join(lines) + "\n"


def find_engine_binaries() -> dict[str, str]:
    found = {}
    for binary in sorted(
        {spec.default_binary for spec in all_engine_specs() if spec.default_binary}
    ):
        path = shutil.which(binary)
        if path:
            found[binary] = path
    return found


def init_config(home: Home, *, force: bool = False, detect: bool = False) -> Path:
    """Write the commented config (`detect`: the engines found enabled); refuse to overwrite
    unless forced. Validates before writing."""
    home.ensure()
    if home.config_path.exists() and not force:
        raise ConfigInvalid(f"{home.config_path} exists; pass --force to overwrite", field="config")
    text = render_init_config(find_engine_binaries(), enable=detect)
    parse_config(text)
    write_private_file(home.config_path, text.encode())
    return home.config_path
