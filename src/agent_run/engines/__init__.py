"""Engines: one module per coding-agent CLI, each behind the interface in `base`."""

from agent_run.engines.base import Engine


def engine_for(name: str) -> Engine:
    """The engine module for a runtime's `engine` name; imports only that engine."""
    if name == "demo":
        from agent_run.engines.demo import DemoEngine

        return DemoEngine()
    raise KeyError(f"no engine named {name!r} in this build")
