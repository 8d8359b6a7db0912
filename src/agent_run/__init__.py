"""agent-run: a local-first supervisor for coding-agent CLIs."""

__version__ = "0.1.0"
