"""Keeps a native login's credential shared while an engine runs: the link, and the redactor.

Before each chunk of engine output is redacted, on every pass of the supervisor's loop, and at
the end: if the engine replaced the link to the real credential file with a file of its own,
that file is published to the real one and the link restored (`CredentialLink.keep`, a guard:
Codex writes through its link, Claude Code gets no link); if the real file changed (this engine
or another agent refreshed a
token), its token values join the redactor's list. An engine writes a refreshed token before
it sends the request whose answer could print it, so checking before each chunk is redacted
keeps a token issued mid-run out of everything stored (the engine's stderr, redacted on its
own thread, can race the check).
"""

import json
from typing import Any

from agent_run.engines.registry import sign_in_for
from agent_run.engines.signin import CredentialLink, SignIn, is_native, share_credential
from agent_run.supervisor.redact import Redactor


class SignInKeeper:
    def __init__(self, sign_in: SignIn, link: CredentialLink, redact: Redactor) -> None:
        self.sign_in = sign_in
        self.link = link
        self.redact = redact
        self.seen: tuple[int, int] | None = None  # the first check reads the file

    @classmethod
    def start(
        cls, engine: str, auth: dict[str, Any] | None, engine_home: str, redact: Redactor
    ) -> "SignInKeeper | None":
        """Share the credential with the generated home (native login only) and keep it."""
        if not is_native(auth):
            return None
        sign_in = sign_in_for(engine)
        link = share_credential(sign_in, auth, engine_home)
        return cls(sign_in, link, redact) if sign_in is not None and link is not None else None

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = self.link.target.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def check(self) -> None:
        """Two stats when nothing changed: cheap enough before every chunk of engine output."""
        self.link.keep()
        stamp = self._stamp()
        if stamp == self.seen:
            return
        self.seen = stamp
        try:
            data = json.loads(self.link.target.read_text())
        except (OSError, ValueError):
            return
        self.redact.add(self.sign_in.parse(data if isinstance(data, dict) else {}).secrets)
