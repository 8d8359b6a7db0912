"""The runtimes and models the Start agent and New batch forms offer, from the home's config.

No tool lists the configured runtimes yet, so the web process reads config.toml the way
`agent-run doctor` does, on every render of a form. The daemon reads the same file when it
starts and validates every start against it, so after an edit that the daemon has not yet
picked up, its typed error shows next to the field.
Only names, engines and model lists leave this module: never auth or env.
"""

from dataclasses import dataclass, field

from agent_run.config import load_config
from agent_run.domain.errors import DomainError
from agent_run.home import Home


@dataclass(frozen=True)
class RuntimeChoice:
    name: str
    engine: str
    models: tuple[str, ...]
    default_model: str | None


@dataclass(frozen=True)
class RuntimeChoices:
    default: str | None = None
    runtimes: tuple[RuntimeChoice, ...] = ()
    error: str | None = None  # the config could not be read: both fields stay free text
    names: frozenset[str] = field(default_factory=frozenset)

    @property
    def free_model(self) -> bool:
        """Model is free text when some runtime has no model list (or none could be read)."""
        return not self.runtimes or any(not r.models for r in self.runtimes)

    def offers(self, runtime: str | None, model: str) -> bool:
        return any(r.name == runtime and model in r.models for r in self.runtimes)


def runtime_choices(home: Home) -> RuntimeChoices:
    try:
        config = load_config(home)
    except DomainError as exc:
        return RuntimeChoices(error=exc.message)
    runtimes = tuple(
        RuntimeChoice(
            name, str(getattr(r.engine, "value", r.engine)), tuple(r.models), r.default_model
        )
        for name, r in sorted(config.runtimes.items())
        if r.enabled
    )
    return RuntimeChoices(
        default=config.default_runtime, runtimes=runtimes, names=frozenset(r.name for r in runtimes)
    )
