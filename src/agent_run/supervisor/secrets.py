"""A runtime's credential: resolved by the daemon at spawn time, handed to the supervisor on its
stdin as one JSON payload, never through its environment or argv.

`auth` names a variable of the daemon's environment or a file. The payload is
`{"secrets": {NAME: VALUE}}`, or `{"auth_error": MESSAGE}` when the credential cannot be had
(the supervisor then ends the execution `failed/config_error`). A native login
(`auth.login = "native"`) has no secret to hand over: the engine reads its own credential file,
linked into its home. Its payload is `{"secrets": {}, "redact": [TOKEN, ...]}` (the file's token
values, for the redactor), or `{"auth_error": MESSAGE, "failure": "auth_failed"}` naming
`agent-run login RUNTIME` when the sign-in is missing or signed out, so no model request is
made. A supervisor that reads no
payload at all (its spawner died first) exits before recording itself, so its row stays
`created` for a later spawn.
"""

import json
import os
import sqlite3
from pathlib import Path
from typing import IO, Any

from agent_run.engines.options import auth_file_too_open
from agent_run.engines.registry import sign_in_for
from agent_run.engines.signin import SignInMissing, is_native, read_credential
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
            raise ValueError(
                f"runtime auth: variable {name} is not set in the daemon's environment"
            )
        return {name: value}
    path = Path(os.path.expanduser(auth["file"]))
    if why := auth_file_too_open(str(path)):
        raise ValueError(f"runtime auth: {why}")
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
    plan = json.loads(row["plan_json"]) if row else {}
    auth = plan.get("runtime_config", {}).get("auth") if row else None
    if is_native(auth):  # the advice names the account's sign-in: `login RUNTIME --account LABEL`
        target = plan["runtime"] + (f" --account {row['account']}" if row["account"] else "")
        return json.dumps(native_login_payload(plan["engine"], auth, target)).encode() + b"\n"
    try:
        payload: dict[str, Any] = {"secrets": resolve_secrets(auth)}
    except ValueError as exc:
        payload = {"auth_error": str(exc)}
    return json.dumps(payload).encode() + b"\n"


def native_login_payload(engine: str, auth: dict[str, Any], runtime: str) -> dict[str, Any]:
    """No secret to pass: the tokens to redact, or why the sign-in cannot be used."""
    sign_in = sign_in_for(engine)
    if sign_in is None:
        return {"auth_error": f"runtime auth: the {engine} engine has no native login"}
    try:
        credential = read_credential(sign_in, auth, runtime)
    except SignInMissing as exc:
        return {"auth_error": str(exc), "failure": "auth_failed"}
    return {"secrets": {}, "redact": credential.secrets}


def read_payload(stream: IO[bytes]) -> dict[str, Any] | None:
    """The spawner's payload, or None when the stream ended without a whole one."""
    data = stream.read(MAX_PAYLOAD_BYTES)
    try:
        payload = json.loads(data) if data.endswith(b"\n") else None
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None
