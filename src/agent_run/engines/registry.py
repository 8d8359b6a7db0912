"""The engine registry: one `EngineSpec` per engine, built-ins and plug-ins loaded the same way.

An engine is a module that defines an `EngineSpec`; it is named in `BUILTIN_ENGINES` (built-in)
or in the `agent_run.engines` entry-point group of an installed distribution (a plug-in), both
as `name = "module:attribute"`. A spec is imported only when its name is first looked up, so a
supervisor imports its own engine's module and no other; the entry points are read only for a
name that is not built in, or when every engine is listed (`agent-run init`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticCustomError

from agent_run.engines.options import FIELD_ERROR, RuntimeOptions

if TYPE_CHECKING:  # base imports the plan, which validates through this registry
    from agent_run.engines.base import Engine
    from agent_run.engines.signin import SignIn

ENTRY_POINT_GROUP = "agent_run.engines"

# name -> "module:attribute" of its EngineSpec, the form of an entry point.
BUILTIN_ENGINES: Mapping[str, str] = {
    "demo": "agent_run.engines.demo:SPEC",
    "codex": "agent_run.engines.codex:SPEC",
    "claude": "agent_run.engines.claude:CLAUDE_SPEC",
    "glm": "agent_run.engines.claude:GLM_SPEC",
    "qwen": "agent_run.engines.qwen:SPEC",
}


@dataclass(frozen=True)
class EngineSpec:
    """What agent-run knows of an engine before it runs one."""

    name: str
    factory: Callable[[], Engine]  # a fresh engine object for one execution
    options: type[RuntimeOptions]  # its `[runtimes.NAME]` keys; `engine` is Literal[name]
    summary: str
    default_binary: str | None = None  # looked up on PATH by `init` and `doctor`; None: none needed
    # A runtime block `init` writes (commented out) when the binary is found.
    config_example: Mapping[str, Any] = field(default_factory=dict)
    # Does a message sent during a turn open a turn of its own (False: it joins the running one)?
    steer_opens_turn: bool = True
    # The provider URL the supervisor's credential broker forwards to when the runtime sets no
    # `base_url`; None: the engine calls no provider, so it gets the secret itself.
    broker_upstream: str | None = None
    # The engine's own sign-in a runtime can run on (`auth = { login = "native" }`), or None.
    sign_in: SignIn | None = None
    # Why a native login cannot work for it (None with a sign-in, or for the generic reason).
    no_native_login: str | None = None


class UnknownEngine(KeyError):
    """No engine of that name is built in or installed."""


_loaded: dict[str, EngineSpec] = {}
_plugins: dict[str, str] | None = None  # the entry points, read once


def register(spec: EngineSpec) -> EngineSpec:
    """Make `spec` known under its name; a different spec under a taken name is refused."""
    existing: object = _loaded.get(spec.name)
    if existing is None and spec.name in BUILTIN_ENGINES:
        existing = _import(BUILTIN_ENGINES[spec.name])
    if existing is not None and existing is not spec:
        raise ValueError(f"engine {spec.name!r} is registered twice")
    _loaded[spec.name] = spec
    return spec


def _plugin_targets() -> dict[str, str]:
    global _plugins
    if _plugins is None:
        from importlib.metadata import entry_points  # read only when a plug-in is wanted

        _plugins = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _plugins


def _import(target: str) -> object:
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _load(name: str, target: str) -> EngineSpec:
    spec = _import(target)
    if not isinstance(spec, EngineSpec) or spec.name != name:
        raise TypeError(f"{target} is not the EngineSpec of engine {name!r}")
    return register(spec)


def engine_spec(name: str) -> EngineSpec:
    """The spec of engine `name`, importing its module on first use."""
    spec = _loaded.get(name)
    if spec is not None:
        return spec
    target = BUILTIN_ENGINES.get(name) or _plugin_targets().get(name)
    if target is None:
        raise UnknownEngine(name)
    return _load(name, target)


def engine_names() -> list[str]:
    """Every engine: the built-ins in their order, then plug-ins and registered ones by name."""
    extra = sorted((set(_plugin_targets()) | set(_loaded)) - set(BUILTIN_ENGINES))
    return [*BUILTIN_ENGINES, *extra]


def all_engine_specs() -> list[EngineSpec]:
    return [engine_spec(name) for name in engine_names()]


def engine_for(name: str) -> Engine:
    """A fresh engine object for one execution of engine `name`."""
    return engine_spec(name).factory()


def runtime_options(value: object) -> RuntimeOptions:
    """Validate one runtime table against the options model of the engine it names."""
    if isinstance(value, RuntimeOptions):
        return value
    engine = value.get("engine") if isinstance(value, dict) else None
    if not isinstance(engine, str):
        return RuntimeOptions.model_validate(value)  # names the missing or mistyped `engine`
    try:
        spec = engine_spec(engine)
    except UnknownEngine:
        raise PydanticCustomError(
            f"{FIELD_ERROR}engine",
            "no engine named '{engine}' is installed (built in: {builtin})",
            {"engine": engine, "builtin": ", ".join(BUILTIN_ENGINES)},
        ) from None
    return spec.options.model_validate(value)


def sign_in_for(name: str) -> SignIn | None:
    """Engine `name`'s native sign-in, or None (no such engine, or it has none)."""
    try:
        return engine_spec(name).sign_in
    except UnknownEngine:
        return None


def native_login_refusal(name: str) -> str | None:
    """Why `login = "native"` cannot work for engine `name`, or None when it can."""
    try:
        spec: EngineSpec | None = engine_spec(name)
    except UnknownEngine:
        spec = None
    if spec is not None and spec.sign_in is not None:
        return None
    return (spec.no_native_login if spec else None) or (
        f"the {name} engine has no native sign-in agent-run can use: "
        "use an API key (auth.env or auth.file)"
    )
