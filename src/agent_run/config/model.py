"""config.toml: the settings model and its fail-closed loading (dotted field paths in every error)."""

import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    PlainValidator,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agent_run.config.hosts import HostConfig, HostName
from agent_run.domain.errors import ConfigInvalid
from agent_run.engines.options import FIELD_ERROR as _FIELD_ERROR
from agent_run.engines.options import AuthConfig, RuntimeOptions, StrictModel, auth_file_too_open
from agent_run.engines.registry import runtime_options
from agent_run.system.home import Home

__all__ = ["AuthConfig", "Config", "RuntimeConfig", "load_config", "parse_config"]

SCHEMA_VERSION = 1

ModelClassName = Annotated[str, Field(pattern=r"^[a-z0-9_-]{1,64}$")]
# `runtime:model`: a configured runtime and one of its models.
RuntimeModel = Annotated[str, Field(pattern=r"^[^:\s]{1,200}:[^\s]{1,200}$")]

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
    busy_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="how long one of a supervisor's writes waits for another writer's lock on "
        "state.db; past it the supervisor keeps what it was writing and tries again (a locked "
        "database never ends a run)",
    )
    nice: int = Field(
        default=5,
        ge=0,
        le=19,
        description="the niceness of an agent's supervisor and engine, and of their sessions' "
        "scheduling groups on Linux: agents yield the CPU to the daemon and your own work "
        "(0: the default priority, agents fastest on a busy machine; 10: the daemon most "
        "responsive while agents swarm; bench/README.md, bench_nice.py)",
    )


class DaemonConfig(StrictModel):
    reconcile_interval_seconds: float = Field(default=2.0, gt=0)
    answer_scrub_seconds: float = Field(
        default=3600.0, gt=0, description="each sealed answer is re-hashed once per this period"
    )
    # Logs (read when the daemon starts): daemon.log is rotated as it passes log_max_bytes;
    # daemon.out and zygote.log, which other processes append to, are cut every
    # log_check_seconds once past it (docs/internals/daemon.md, "Storage").
    log_max_bytes: int = Field(default=10 * 1024 * 1024, ge=4096, le=2**40)
    log_keep: int = Field(default=3, ge=1, le=100, description="rotated copies kept: .1 ... .N")
    log_check_seconds: float = Field(default=60.0, gt=0, le=86400)
    busy_timeout_seconds: float = Field(
        default=30.0,
        ge=0.1,
        le=3600,
        description="how long a daemon write waits for another writer's lock on state.db "
        "before it fails (read when the daemon starts)",
    )
    notice_unacked_seconds: float = Field(
        default=30.0,
        gt=0,
        le=86400,
        description="an MCP channel notice pushed but not acknowledged for this long is "
        "ambiguous and pushed again",
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


class RetentionConfig(StrictModel):
    """`[retention]`: what `agent-run prune` (and the daemon, every `interval_seconds`) removes.
    Never a running agent, an agent of a live batch, or anything outside the home's `agents/`
    and `homes/` (worktrees and workdirs are never touched)."""

    agent_days: float = Field(
        default=30.0,
        gt=0,
        allow_inf_nan=False,
        description="a terminal agent's rows, events, messages and logs go this long after it ended",
    )
    engine_home_days: float = Field(
        default=7.0,
        gt=0,
        allow_inf_nan=False,
        description="a terminal agent's engine home goes this long after it ended",
    )
    prune_answers: bool = Field(
        default=False, description="also remove sealed answers (kept, with the agent's row, if not)"
    )
    interval_seconds: float = Field(
        default=86_400.0, ge=1, allow_inf_nan=False, description="how often the daemon prunes"
    )


Price = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]  # strict: no bool


class PriceConfig(StrictModel):
    """`[prices."RUNTIME:MODEL"]`: what a million tokens cost, in USD. Used only when the engine
    reports no cost of its own (docs/capacity.md, "Usage")."""

    input_per_mtok: Price
    output_per_mtok: Price


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
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    runtimes: dict[str, RuntimeConfig] = Field(default_factory=_default_runtimes)
    hosts: dict[HostName, HostConfig] = Field(
        default_factory=dict,
        description="other machines whose own agent-run runs agents (`start --host NAME`)",
    )
    model_classes: dict[ModelClassName, list[RuntimeModel]] = Field(
        default_factory=dict,
        description="`start --route auto --model-class NAME`: the `runtime:model` pairs it may use",
    )
    prices: dict[RuntimeModel, PriceConfig] = Field(
        default_factory=dict,
        description="`runtime:model` -> USD per million input / output tokens, for engines "
        "that report no cost",
    )

    def price_of(self, runtime: str, model: str) -> PriceConfig | None:
        return self.prices.get(f"{runtime}:{model}")

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

    @model_validator(mode="after")
    def _model_classes_name_configured_models(self) -> "Config":
        for name, pairs in self.model_classes.items():
            if not pairs:
                raise PydanticCustomError(
                    f"{_FIELD_ERROR}model_classes.{name}", "a model class lists at least one pair"
                )
            for index, pair in enumerate(pairs):
                runtime_name, model = pair.split(":", 1)
                runtime = self.runtimes.get(runtime_name)
                if runtime is None:
                    why = f"no runtime {runtime_name!r} is configured"
                elif runtime.models and model not in runtime.models:
                    why = f"model {model!r} is not one of runtime {runtime_name!r}'s models"
                else:
                    continue
                raise PydanticCustomError(f"{_FIELD_ERROR}model_classes.{name}.{index}", why)
        return self

    @model_validator(mode="after")
    def _prices_name_configured_models(self) -> "Config":
        for pair in self.prices:
            runtime_name, model = pair.split(":", 1)
            runtime = self.runtimes.get(runtime_name)
            if runtime is None:
                why = f"no runtime {runtime_name!r} is configured"
            elif runtime.models and model not in runtime.models:
                why = f"model {model!r} is not one of runtime {runtime_name!r}'s models"
            else:
                continue
            raise PydanticCustomError(f"{_FIELD_ERROR}prices.{pair}", why)
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
    for field, auth in _auths(config):
        if auth.file and (why := auth_file_too_open(auth.file)):
            raise ConfigInvalid(f"{source}: `{field}.file`: {why}", field=f"{field}.file")
    return config


def _auths(config: "Config") -> list[tuple[str, AuthConfig]]:
    """Every `auth` table of the config with its dotted path: each runtime's and each of its
    accounts' (`runtimes.NAME.accounts.LABEL.auth`)."""
    found = []
    for name, runtime in config.runtimes.items():
        if runtime.auth is not None:
            found.append((f"runtimes.{name}.auth", runtime.auth))
        for label, account in runtime.accounts.items():
            found.append((f"runtimes.{name}.accounts.{label}.auth", account.auth))
    return found


def load_config(home: Home) -> Config:
    """The home's config, or the built-in defaults (demo runtime) when there is no file."""
    if not home.config_path.exists():
        return default_config()
    return parse_config(home.config_path.read_text(), str(home.config_path))
