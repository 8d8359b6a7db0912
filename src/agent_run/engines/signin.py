"""Native sign-in: running an engine on the login the user made with the engine's own CLI.

A runtime with `auth = { login = "native" }` keeps its generated home, but the engine's one
credential file is the user's real one (`share_credential`): every agent sees the current token
and a refresh the engine writes lands in the real file. An engine that offers one declares a
`SignIn` in its `EngineSpec` (`sign_in`): where the file is, how the engine is pointed at it,
how to read its expiry, which of its values are secrets (for the redactor), which command signs
in, and where the display email is. An engine without one may say why (`no_native_login`);
`registry.native_login_refusal` is what config refuses a native login with. How each engine
shares its file (a link, or a variable naming the real folder) is noted beside its `SignIn`.

Inside agent-run's sandbox the folder is read-write (the rename needs it) but shows only the
credential and each `SignIn.refresh_names` (the engine's lock and temp files): its other entries
are hidden (engines/sandbox.py, `credential_binds`).

`CredentialLink.keep` guards a link all the same: should an engine replace it with a file of its
own, the supervisor (before each chunk of engine output, on every pass of its loop and at the
end) publishes that file to the real one under a lock and restores the link.
"""

import base64
import fcntl
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_run.system.home import write_private_file

NATIVE = "native"
LOCK_NAME = ".agent-run-signin.lock"
# A runtime's `auth`: its config model (`options.AuthConfig`) or that model as stored JSON.
Auth = Any


def auth_fields(auth: Auth) -> dict[str, Any]:
    """A runtime's `auth` as a plain dict, whether a config model or stored JSON."""
    if auth is None:
        return {}
    if isinstance(auth, dict):
        return auth
    fields: dict[str, Any] = auth.model_dump(exclude_none=True)
    return fields


class SignInMissing(ValueError):
    """No usable sign-in: the file is missing, unreadable, or holds no refresh credential."""


@dataclass(frozen=True)
class Credential:
    """What a credential file says, without its secrets' use: for doctor, the redactor, checks."""

    mode: str  # e.g. "apikey", "chatgpt", "oauth"
    secrets: list[str]  # every token value in the file (redacted from everything stored)
    usable: bool  # a key, a refresh token, or an access token that has not expired
    expires_at: float | None = None  # the access token's expiry (epoch seconds), if the file says


@dataclass(frozen=True)
class SignIn:
    engine: str
    title: str
    dir_variable: str  # the engine's variable for the folder holding the file
    default_dir: str  # that folder when the runtime names none
    file_name: str
    home_subdir: str  # where the engine's folder is inside the generated home
    login_argv: tuple[str, ...]  # the engine's own sign-in, after its binary
    parse: Callable[[dict[str, Any]], Credential] = field(repr=False)
    # The engine's own variable for a credential folder apart from its config: set to the real
    # folder instead of linking the file.
    store_variable: str | None = None
    refused_on: dict[str, str] = field(default_factory=dict)  # sys.platform -> why not there
    # What the engine writes beside its credential when it refreshes it: these names, and each
    # followed by `.` (a lock, a temp file). The only entries of the folder a sandbox sees.
    refresh_names: tuple[str, ...] = ()
    # The variable an API key is usually in, for `init`'s "API key instead" line.
    key_variable: str | None = None
    # The flag that makes `login_argv` read an API key from stdin (`login --with-api-key`).
    key_flag: str | None = None
    # Where the account's display email is: (a file in the credential folder, its picker).
    email_sources: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = field(
        default=(), repr=False
    )

    def refreshes(self, name: str) -> bool:
        names = (self.file_name, *self.refresh_names)
        return any(name == n or name.startswith(n + ".") for n in names)

    def credential_dir(self, auth: Auth) -> Path:
        configured = auth_fields(auth).get("dir")
        return Path(os.path.expanduser(configured or self.default_dir))

    def credential_path(self, auth: Auth) -> Path:
        return self.credential_dir(auth) / self.file_name

    def link_path(self, engine_home: str | Path) -> Path:
        return Path(engine_home) / self.home_subdir / self.file_name

    def engine_env(self, auth: Auth) -> dict[str, str]:
        """What the engine's environment needs to find the real file (a store variable)."""
        return {self.store_variable: str(self.credential_dir(auth))} if self.store_variable else {}


def jwt_claims(token: Any) -> dict[str, Any]:
    """A JWT's claims, unverified (only to show an email or when a token runs out); {} if none."""
    if not isinstance(token, str) or token.count(".") < 2:
        return {}
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return {}
    return claims if isinstance(claims, dict) else {}


def jwt_expiry(token: Any) -> float | None:
    """The `exp` claim of a JWT, unverified."""
    exp = jwt_claims(token).get("exp")
    return float(exp) if isinstance(exp, (int, float)) else None


def token_strings(values: Any) -> list[str]:
    """The non-empty strings among `values`: a credential's secrets for the redactor."""
    return [v for v in values if isinstance(v, str) and v]


def email_in(sign_in: SignIn, auth: Auth) -> str | None:
    """The display email the engine keeps beside its credential, or None."""
    folder = sign_in.credential_dir(auth)
    for name, pick in sign_in.email_sources:
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        email = pick(data) if isinstance(data, dict) else None
        if isinstance(email, str) and "@" in email:
            return email
    return None


def is_native(auth: Auth) -> bool:
    return auth_fields(auth).get("login") == NATIVE


def read_credential(
    sign_in: SignIn, auth: Auth, runtime: str, platform: str = sys.platform
) -> Credential:
    """The runtime's sign-in; SignInMissing (naming `agent-run login RUNTIME`) when unusable."""
    if platform in sign_in.refused_on:
        raise SignInMissing(f"runtime {runtime}: {sign_in.refused_on[platform]}")
    path = sign_in.credential_path(auth)
    advice = f"run `agent-run login {runtime}` (it runs `{sign_in.engine} {' '.join(sign_in.login_argv)}`)"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SignInMissing(f"no {sign_in.title} sign-in at {path}: {advice}") from None
    except OSError as exc:
        raise SignInMissing(f"cannot read {path}: {exc.strerror}: {advice}") from None
    except ValueError:
        raise SignInMissing(f"{path} is not JSON: {advice}") from None
    credential = sign_in.parse(data if isinstance(data, dict) else {})
    if not credential.usable:
        raise SignInMissing(
            f"{path} holds no refresh token or key (signed out or expired): {advice}"
        )
    return credential


@dataclass
class CredentialLink:
    """The real credential file and its link in a generated home (none for an engine pointed at
    the real folder by its store variable)."""

    link: Path | None
    target: Path

    def make(self) -> None:
        if self.link is None:
            return
        self.link.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.link.is_symlink() or self.link.exists():
            self.link.unlink()
        self.link.symlink_to(self.target)

    def keep(self) -> bool:
        """If the engine replaced the link with its own file (an atomic write that does not
        follow links), publish that file to the real one and restore the link. True if it did."""
        if self.link is None or self.link.is_symlink() or not self.link.is_file():
            return False
        lock_fd = os.open(self.target.parent / LOCK_NAME, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(lock_fd, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                os.chmod(self.link, 0o600)
                os.replace(self.link, self.target)  # same filesystem: atomic; else copy below
            except OSError:
                _copy_over(self.link, self.target)
                self.link.unlink(missing_ok=True)
            self.make()
        return True


def _copy_over(source: Path, target: Path) -> None:
    write_private_file(target, source.read_bytes())


def share_credential(
    sign_in: SignIn | None, auth: Auth, engine_home: str | Path
) -> CredentialLink | None:
    """Give the generated home the real credential (native login only): a link to it, unless
    the engine is pointed at its folder by its store variable (`SignIn.engine_env`)."""
    if sign_in is None or not is_native(auth):
        return None
    link = None if sign_in.store_variable else sign_in.link_path(engine_home)
    shared = CredentialLink(link, sign_in.credential_path(auth))
    shared.make()
    return shared
