"""A runtime's credential: resolved by the daemon at spawn time, handed to the supervisor on its
stdin as one JSON payload, never through its environment or argv.

`auth` names a variable of the daemon's environment or a file. The payload is
`{"secrets": {NAME: VALUE}}`, or `{"auth_error": MESSAGE}` when the credential cannot be had
(the supervisor then ends the execution `failed/config_error`). A supervisor that reads no
payload at all (its spawner died first) exits before recording itself, so its row stays
`created` for a later spawn.
"""

import json
import os
import sqlite3
from pathlib import Path
from typing import IO, Any

from agent_run.store import agents as agents_q

# The name a secret read from a file goes by; engine adapters map it to their own variable.
FILE_SECRET_NAME = "AGENT_RUN_API_KEY"
MAX_PAYLOAD_BYTES = 1024 * 1024


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


def secret_payload(conn: sqlite3.Connection, execution_id: str) -> bytes:
    """What the spawner writes to a supervisor's stdin: its execution's credential (or why not)."""
    row = agents_q.get_execution(conn, execution_id)
    auth = json.loads(row["plan_json"])["runtime_config"].get("auth") if row else None
    try:
        payload: dict[str, Any] = {"secrets": resolve_secrets(auth)}
    except ValueError as exc:
        payload = {"auth_error": str(exc)}
    return json.dumps(payload).encode() + b"\n"


def read_payload(stream: IO[bytes]) -> dict[str, Any] | None:
    """The spawner's payload, or None when the stream ended without a whole one."""
    data = stream.read(MAX_PAYLOAD_BYTES)
    try:
        payload = json.loads(data) if data.endswith(b"\n") else None
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None
