"""Accounts: several credentials for one runtime (`[runtimes.NAME.accounts.LABEL]`), chosen per run.

A run names an account (`start --account LABEL`), else the runtime's `default_account`, else it
uses the runtime's own `auth`. The chosen account's `auth` replaces the runtime's in the
execution plan, so the supervisor, the credential broker and the native sign-in work unchanged
and a run never changes account (a resume keeps its plan). A native sign-in with no `dir` lives
in `<home>/accounts/<runtime>/<label>/` (0700): that folder is the engine's own credential folder
(`CODEX_HOME` for Codex, `CLAUDE_CONFIG_DIR` for Claude Code), which `agent-run login RUNTIME
--account LABEL` signs into.
"""

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_run.domain import errors
from agent_run.engines.options import AuthConfig, RuntimeOptions
from agent_run.engines.signin import SIGN_INS, SignInMissing, read_credential


def account_dir(home_root: Path, runtime: str, label: str) -> Path:
    return home_root / "accounts" / runtime / label


def account_auth(options: RuntimeOptions, runtime: str, label: str, home_root: Path) -> AuthConfig:
    """The account's `auth`, a native sign-in pointed at its own folder unless it names one."""
    auth = options.accounts[label].auth
    if auth.login is not None and auth.dir is None:
        return auth.model_copy(update={"dir": str(account_dir(home_root, runtime, label))})
    return auth


def choose_account(options: RuntimeOptions, runtime: str, requested: str | None) -> str | None:
    """The account a run uses: the one asked for, else the default, else None (the runtime's auth)."""
    if requested is None:
        return options.default_account
    if requested not in options.accounts:
        known = ", ".join(sorted(options.accounts)) or "none is configured"
        raise errors.InvalidRequest(
            f"runtime {runtime!r} has no account {requested!r} (accounts: {known})", field="account"
        )
    return requested


def options_for_account(
    options: RuntimeOptions, runtime: str, label: str | None, home_root: Path
) -> RuntimeOptions:
    """The runtime's options as a run on `label` sees them: the account's auth in place of its own."""
    if label is None:
        return options
    return options.model_copy(update={"auth": account_auth(options, runtime, label, home_root)})


@dataclass(frozen=True)
class AccountStatus:
    signed_in: bool
    email: str | None
    detail: str  # where the credential comes from, or why it is missing; never a token


def _jwt_claims(token: Any) -> dict[str, Any]:
    if not isinstance(token, str) or token.count(".") < 2:
        return {}
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return {}
    return claims if isinstance(claims, dict) else {}


def _email_in(folder: Path, file_name: str) -> str | None:
    """The display email an engine keeps beside its credential (Codex's id_token, Claude Code's
    `.claude.json` `oauthAccount`), or None."""
    for name, pick in ((file_name, _codex_email), (".claude.json", _claude_email)):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        email = pick(data) if isinstance(data, dict) else None
        if isinstance(email, str) and "@" in email:
            return email
    return None


def _codex_email(data: dict[str, Any]) -> Any:
    tokens = data.get("tokens")
    claims = _jwt_claims(tokens.get("id_token") if isinstance(tokens, dict) else None)
    profile = claims.get("https://api.openai.com/profile")
    return claims.get("email") or (profile.get("email") if isinstance(profile, dict) else None)


def _claude_email(data: dict[str, Any]) -> Any:
    account = data.get("oauthAccount")
    return account.get("emailAddress") if isinstance(account, dict) else None


def account_status(
    engine: str,
    runtime: str,
    auth: AuthConfig,
    label: str | None,
    environ: dict[str, str] | None = None,
) -> AccountStatus:
    """Whether the credential is there (a sign-in file, a set variable, a readable file)."""
    environ = dict(os.environ) if environ is None else environ
    if auth.login is not None:
        sign_in = SIGN_INS[engine]
        command = f"agent-run login {runtime}" + (f" --account {label}" if label else "")
        try:
            credential = read_credential(sign_in, auth, runtime)
        except SignInMissing:
            return AccountStatus(
                False,
                None,
                f"no {sign_in.title} sign-in in {sign_in.credential_dir(auth)}: run `{command}`",
            )
        return AccountStatus(
            True,
            _email_in(sign_in.credential_dir(auth), sign_in.file_name),
            f"{sign_in.title} sign-in ({credential.mode}) in {sign_in.credential_dir(auth)}",
        )
    if auth.env is not None:
        present = bool(environ.get(auth.env))
        return AccountStatus(
            present,
            None,
            f"variable {auth.env} "
            + ("is set" if present else "is not set in the daemon's environment"),
        )
    path = Path(os.path.expanduser(auth.file or ""))
    readable = path.is_file() and os.access(path, os.R_OK)
    return AccountStatus(
        readable,
        None,
        f"file {path} " + ("is readable" if readable else "is missing or unreadable"),
    )
