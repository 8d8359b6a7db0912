"""agent-run: a local-first supervisor for coding-agent CLIs."""

# The one place the version is written: the wheel's metadata reads it (pyproject.toml).
__version__ = "0.2.0.dev0"
