"""Accounts: several credentials for one runtime (`[runtimes.NAME.accounts.LABEL]`), chosen per run.

A run names an account (`start --account LABEL`), else the runtime's `default_account`, else it
uses the runtime's own `auth`. The chosen account's `auth` replaces the runtime's in the
execution plan, so the supervisor, the credential broker and the native sign-in work unchanged
and a run never changes account (a resume keeps its plan). A native sign-in with no `dir` lives
in `<home>/accounts/<runtime>/<label>/` (0700): that folder is the engine's own credential folder
(its `SignIn.dir_variable`), which `agent-run login RUNTIME --account LABEL` signs into.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from agent_run.domain import errors
from agent_run.engines.options import AuthConfig, RuntimeOptions
from agent_run.engines.registry import UnknownEngine, engine_spec, sign_in_for
from agent_run.engines.signin import SignInMissing, email_in, read_credential


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


def account_identity(
    options: RuntimeOptions, runtime: str, label: str | None, home_root: Path
) -> str:
    """The provider account a (runtime, account) spends, as a pool key: the provider (the
    runtime's `base_url`, else its engine's default upstream) and the credential's *reference*
    (an `env` variable's name, a `file`'s resolved path, a native sign-in's resolved folder),
    never the secret itself. The account label is not part of it: two labels, runtimes or
    aliases with the same credential are one account; different credentials never are."""
    auth = options_for_account(options, runtime, label, home_root).auth
    base_url = getattr(options, "base_url", None) or _default_upstream(options.engine)
    if auth is None:  # no credential of ours: the runtime's own engine setup, shared with no one
        return f"{base_url}|none:{runtime}"
    if auth.env is not None:
        return f"{base_url}|env:{auth.env}"
    if auth.file is not None:
        return f"{base_url}|file:{os.path.realpath(os.path.expanduser(auth.file))}"
    sign_in = sign_in_for(options.engine)
    folder = sign_in.credential_dir(auth) if sign_in is not None else auth.dir
    return f"{base_url}|login:{options.engine}:{os.path.realpath(os.path.expanduser(str(folder)))}"


def _default_upstream(engine: str) -> str:
    try:
        return engine_spec(engine).broker_upstream or ""
    except UnknownEngine:  # an engine no longer installed: its name stands for its provider
        return f"engine:{engine}"


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


def account_status(
    engine: str,
    runtime: str,
    auth: AuthConfig,
    label: str | None,
    environ: dict[str, str] | None = None,
) -> AccountStatus:
    """Whether the credential is there (a sign-in file, a set variable, a readable file)."""
    environ = dict(os.environ) if environ is None else environ
    sign_in = sign_in_for(engine)
    if auth.login is not None and sign_in is not None:  # config refuses a login without one
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
            email_in(sign_in, auth),
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
