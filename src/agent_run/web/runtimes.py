"""The runtimes and models the Start agent and New batch forms offer, from the `models` tool.

The daemon answers from the config it serves (re-read when config.toml changed and is valid),
the same roster `start` and `batch_start` check a model against: a model not in it is refused
with a typed error naming `model`, which the form shows next to that field. When the daemon
cannot answer, both fields stay free text and the form says why.
Only names, engines and model lists reach the page: never auth, env or account labels.
"""

from dataclasses import dataclass, field
from typing import Any

from agent_run.domain.errors import DomainError, ProtocolError


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
    error: str | None = None  # the daemon could not say: both fields stay free text
    names: frozenset[str] = field(default_factory=frozenset)

    @property
    def free_model(self) -> bool:
        """Model is free text when some runtime has no model list (or none could be read)."""
        return not self.runtimes or any(not r.models for r in self.runtimes)

    def offers(self, runtime: str | None, model: str) -> bool:
        return any(r.name == runtime and model in r.models for r in self.runtimes)


def choices_from(result: dict[str, Any]) -> RuntimeChoices:
    """The form's choices from a `models` answer (`ModelsResult` as JSON), sorted by name."""
    runtimes = tuple(
        RuntimeChoice(r["runtime"], r["engine"], tuple(r["models"]), r["default_model"])
        for r in sorted(result["runtimes"], key=lambda r: r["runtime"])
    )
    return RuntimeChoices(
        default=result["default_runtime"],
        runtimes=runtimes,
        names=frozenset(r.name for r in runtimes),
    )


async def runtime_choices(proxy: Any) -> RuntimeChoices:
    """Ask the daemon (`models`) what the forms offer; on failure, free text with the reason."""
    try:
        return choices_from(await proxy.call("models", {}))
    except (DomainError, ProtocolError, OSError) as exc:
        return RuntimeChoices(error=getattr(exc, "message", None) or str(exc) or type(exc).__name__)
