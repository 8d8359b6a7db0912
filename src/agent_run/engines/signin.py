"""Native sign-in: running an engine on the login the user made with the engine's own CLI.

A runtime with `auth = { login = "native" }` keeps its generated home, but the engine's one
credential file is the user's real one (`share_credential`): every agent sees the current token
and a refresh the engine writes lands in the real file. One `SignIn` per engine says where the
file is, how the engine is pointed at it, how to read its expiry, which of its values are
secrets (for the redactor) and which command signs in. Checked against codex 0.171.0 and
claude-code 2.1.332:

- Codex: the file is linked into the generated `$CODEX_HOME`. Codex resolves the link before it
  writes: its temp file, rename and `auth.json.lock` are all in the real file's folder, so the
  link survives its writes and its own lock serialises refreshes between agents.
- Claude Code: `CLAUDE_SECURESTORAGE_CONFIG_DIR` moves its credential store (and its OAuth
  refresh lock, `.oauth_refresh.lock.owner`) out of `CLAUDE_CONFIG_DIR`: it is set to the real
  folder, so refreshes are written there (temp file + rename) under Claude Code's own lock,
  shared by every agent. No link: Claude Code's credential writer does not follow links (a
  refresh would replace one with a private copy).

`CredentialLink.keep` guards a link all the same: should an engine replace it with a file of its
own, the supervisor (before each chunk of engine output, on every pass of its loop and at the
end) publishes that file to the real one under a lock and restores the link.

Qwen Code's OAuth (`~/.qwen/oauth_creds.json`) was discontinued on 2026-04-15 and 0.24.4 no
longer offers it: config refuses a native login for `qwen` (`NATIVE_LOGIN_REFUSED`).
"""

import base64
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_run.home import write_private_file

NATIVE = "native"
LOCK_NAME = ".agent-run-signin.lock"
# A runtime's `auth`: its config model (`options.AuthConfig`) or that model as stored JSON.
Auth = Any

# Engines with no native sign-in agent-run can use, and why (SIGN_INS below has the others).
NATIVE_LOGIN_REFUSED = {
    "qwen": "Qwen OAuth was discontinued on 2026-04-15 (Qwen Code 0.24.4 no longer offers it): "
    "use an API key (auth.env or auth.file)",
    "glm": "GLM has no native sign-in: use an API key (auth.env or auth.file)",
    "demo": "the demo engine needs no sign-in",
}


def auth_fields(auth: Auth) -> dict[str, Any]:
    """A runtime's `auth` as a plain dict, whether a config model or stored JSON."""
    if auth is None:
        return {}
    if isinstance(auth, dict):
        return auth
    fields: dict[str, Any] = auth.model_dump(exclude_none=True)
    return fields


def native_login_refusal(engine: str) -> str | None:
    """Why `login = "native"` cannot work for `engine`, or None when it can."""
    if engine in SIGN_INS:
        return None
    return NATIVE_LOGIN_REFUSED.get(
        engine,
        f"the {engine} engine has no native sign-in agent-run can use: "
        "use an API key (auth.env or auth.file)",
    )


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


def _jwt_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT, unverified (only to report when it runs out)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, (int, float)) else None


def _strings(values: Any) -> list[str]:
    return [v for v in values if isinstance(v, str) and v]


def _codex(data: dict[str, Any]) -> Credential:
    """`auth.json`: `{"auth_mode": "apikey", "OPENAI_API_KEY": ...}` or ChatGPT tokens."""
    key = data.get("OPENAI_API_KEY")
    found = data.get("tokens")
    tokens: dict[str, Any] = found if isinstance(found, dict) else {}
    secrets = _strings(
        [key, tokens.get("id_token"), tokens.get("access_token"), tokens.get("refresh_token")]
    )
    if isinstance(key, str) and key:
        return Credential("apikey", secrets, usable=True)
    access = tokens.get("access_token")
    expires = _jwt_expiry(access) if isinstance(access, str) else None
    return Credential(
        str(data.get("auth_mode") or "chatgpt"),
        secrets,
        usable=bool(tokens.get("refresh_token")),
        expires_at=expires,
    )


def _claude(data: dict[str, Any]) -> Credential:
    """`.credentials.json`: `{"claudeAiOauth": {accessToken, refreshToken, expiresAt (ms)}}`."""
    found = data.get("claudeAiOauth")
    oauth: dict[str, Any] = found if isinstance(found, dict) else {}
    secrets = _strings([oauth.get("accessToken"), oauth.get("refreshToken")])
    expires_ms = oauth.get("expiresAt")
    expires = expires_ms / 1000 if isinstance(expires_ms, (int, float)) else None
    access_valid = bool(oauth.get("accessToken")) and (expires is None or expires > time.time())
    return Credential(
        "oauth", secrets, usable=bool(oauth.get("refreshToken")) or access_valid, expires_at=expires
    )


SIGN_INS: dict[str, SignIn] = {
    "codex": SignIn(
        "codex", "Codex", "CODEX_HOME", "~/.codex", "auth.json", ".codex", ("login",), _codex
    ),
    "claude": SignIn(
        "claude",
        "Claude Code",
        "CLAUDE_CONFIG_DIR",
        "~/.claude",
        ".credentials.json",
        ".claude",
        ("auth", "login"),
        _claude,
        store_variable="CLAUDE_SECURESTORAGE_CONFIG_DIR",
        refused_on={
            "darwin": "on macOS Claude Code keeps its sign-in in the login keychain, "
            "not in a file agent-run can link: use an API key (auth.env)"
        },
    ),
}


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


def share_credential(engine: str, auth: Auth, engine_home: str | Path) -> CredentialLink | None:
    """Give the generated home the real credential (native login only): a link to it, unless
    the engine is pointed at its folder by its store variable (`SignIn.engine_env`)."""
    sign_in = SIGN_INS.get(engine)
    if sign_in is None or not is_native(auth):
        return None
    link = None if sign_in.store_variable else sign_in.link_path(engine_home)
    shared = CredentialLink(link, sign_in.credential_path(auth))
    shared.make()
    return shared
