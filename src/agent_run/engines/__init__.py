"""Engines: one module per coding-agent CLI, each behind the interface in `base`."""

from agent_run.engines.base import Engine


def engine_for(name: str) -> Engine:
    """The engine module for a runtime's `engine` name; imports only that engine."""
    if name == "demo":
        from agent_run.engines.demo import DemoEngine

        return DemoEngine()
    if name == "codex":
        from agent_run.engines.codex import CodexEngine

        return CodexEngine()
    if name == "claude":
        from agent_run.engines.claude import ClaudeEngine

        return ClaudeEngine()
    if name == "glm":
        from agent_run.engines.claude import GlmEngine

        return GlmEngine()
    if name == "qwen":
        from agent_run.engines.qwen import QwenEngine

        return QwenEngine()
    raise KeyError(f"no engine named {name!r} in this build")
