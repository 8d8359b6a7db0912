"""`agent-run login RUNTIME` (the engine's own sign-in; `doctor` checks it in the daemon).

A runtime with `auth = { login = "native" }` runs its engine on the user's own sign-in
(engines/signin.py). `login` runs the engine's sign-in command in the user's terminal, against
the folder the runtime reads (`auth.dir`, else the engine's default), so the file it writes is
the one every agent links. A browser flow needs a terminal: without one, `login` says what to run
instead. Neither command ever prints a token.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import click

from agent_run.domain.errors import ConfigInvalid


def _native_runtime(
    session: Any, name: str, account: str | None
) -> tuple[Any, Any, dict[str, Any]]:
    """(runtime config, its SignIn, the auth to sign in: the account's, in its own folder)."""
    from agent_run.config.model import load_config
    from agent_run.engines.accounts import account_auth
    from agent_run.engines.registry import sign_in_for

    runtime = load_config(session.home).runtimes.get(name)
    if runtime is None:
        raise ConfigInvalid(f"no runtime named {name!r} in the config", field="runtime")
    sign_in = sign_in_for(runtime.engine)  # config refuses a native login without one
    if account is not None:
        if account not in runtime.accounts:
            known = ", ".join(sorted(runtime.accounts)) or "none is configured"
            raise ConfigInvalid(
                f"runtime {name!r} has no account {account!r} (accounts: {known})", field="account"
            )
        if runtime.accounts[account].auth.login is None:
            raise ConfigInvalid(
                f"account {account!r} does not use a native login: set `auth = {{ login = "
                f'"native" }}` under [runtimes.{name}.accounts.{account}]',
                field="account",
            )
        return (
            runtime,
            sign_in,
            account_auth(runtime, name, account, session.home.root).model_dump(),
        )
    if runtime.auth is None or runtime.auth.login is None:
        raise ConfigInvalid(
            f"runtime {name!r} does not use a native login: set "
            f'`auth = {{ login = "native" }}` under [runtimes.{name}]',
            field="runtime",
        )
    return runtime, sign_in, runtime.auth.model_dump()


def describe_signin(sign_in: Any, auth: dict[str, Any], runtime: str) -> tuple[bool, str]:
    """Whether the sign-in is there and when its access token expires; never a token."""
    from agent_run.engines.signin import SignInMissing, read_credential

    try:
        credential = read_credential(sign_in, auth, runtime)
    except SignInMissing as exc:
        return False, str(exc)
    detail = f"{sign_in.credential_path(auth)} ({credential.mode})"
    if credential.expires_at is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(credential.expires_at))
        aged = " (the engine refreshes it)" if credential.expires_at < time.time() else ""
        detail += f", access token expires {stamp}{aged}"
    return True, detail


@click.command("login")
@click.argument("runtime")
@click.option(
    "--account",
    default=None,
    help="sign in one of the runtime's accounts, in its own folder "
    "(<home>/accounts/RUNTIME/LABEL unless it names `dir`)",
)
@click.option(
    "--with-api-key",
    "with_key",
    is_flag=True,
    help="read an API key from stdin instead of a browser sign-in (an engine whose sign-in can)",
)
@click.pass_context
def login_cmd(ctx: click.Context, runtime: str, account: str | None, with_key: bool) -> None:
    """Sign in with the engine's own CLI for a runtime (or --account) that uses `auth = { login = "native" }`."""
    session = ctx.obj
    config, sign_in, auth = _native_runtime(session, runtime, account)
    command = f"agent-run login {runtime}" + (f" --account {account}" if account else "")
    argv = [config.binary or shutil.which(sign_in.engine) or sign_in.engine, *sign_in.login_argv]
    if with_key:
        if sign_in.key_flag is None:
            raise ConfigInvalid(
                f"the {sign_in.engine} sign-in cannot read a key from stdin", field="with_api_key"
            )
        argv.append(sign_in.key_flag)
    elif not sys.stdin.isatty():  # a usage error (exit 64), never 2: a wait's failed/lost
        raise click.UsageError(
            f"`{' '.join(argv[1:])}` opens a browser sign-in: run `{command}` in a terminal"
            + (" (or pipe a key to `--with-api-key`)" if sign_in.key_flag else "")
        )
    env = dict(os.environ)
    if auth.get("dir"):  # else the engine's default folder, as when the user runs it directly
        folder = sign_in.credential_dir(auth)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # Codex refuses a missing CODEX_HOME
        if account is not None:
            folder.chmod(0o700)  # an account's sign-in folder is the user's alone
        env[sign_in.dir_variable] = str(folder)
    else:  # the user's own variable would point the engine elsewhere than agent-run reads
        env.pop(sign_in.dir_variable, None)
    code = subprocess.run(argv, env=env, check=False).returncode
    ok, detail = describe_signin(sign_in, auth, runtime)
    if session.output == "json":
        click.echo(
            json.dumps(
                {
                    "runtime": runtime,
                    "account": account,
                    "ok": ok and code == 0,
                    "exit_code": code,
                    "detail": detail,
                }
            )
        )
    else:
        click.echo(f"{'signed in' if ok else 'NOT signed in'}: {detail}")
    sys.exit(0 if ok and code == 0 else 1)
