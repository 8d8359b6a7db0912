"""Resolving a runtime's `auth` (a variable name or a file) to the secret value, at launch only."""

import os
from pathlib import Path
from typing import Any

# The name a secret read from a file goes by; engine adapters map it to their own variable.
FILE_SECRET_NAME = "AGENT_RUN_API_KEY"


def resolve_secrets(auth: dict[str, Any] | None) -> dict[str, str]:
    """{variable name: value} for the runtime's credential; ValueError names what is missing."""
    if not auth:
        return {}
    if auth.get("env"):
        name = auth["env"]
        value = os.environ.get(name)
        if not value:
            raise ValueError(f"runtime auth: variable {name} is not set in the daemon's environment")
        return {name: value}
    path = Path(os.path.expanduser(auth["file"]))
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"runtime auth: cannot read {path}: {exc.strerror}") from None
    if not value:
        raise ValueError(f"runtime auth: {path} is empty")
    return {FILE_SECRET_NAME: value}
