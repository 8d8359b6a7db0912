"""The daemon's config.toml, reloaded when it changes: checked (stat, then content hash) on each
admission and on SIGHUP. An invalid new file is refused with its dotted field and the last good
config kept; the refusal is reported by `status` and `doctor` until a good file replaces it."""

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from agent_run.config.model import Config, default_config, parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.system.home import Home

DEFAULTS_REVISION = "defaults"  # no config.toml: the built-in defaults


def revision_of(text: str | None) -> str:
    """A config's revision: the first 12 hex digits of its sha256 (or `defaults`)."""
    if text is None:
        return DEFAULTS_REVISION
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Refusal:
    """A config.toml the daemon refused: why, the field, the refused revision, when."""

    message: str
    field: str | None
    revision: str
    at: float


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


class LiveConfig:
    """The config a daemon runs with. Made once at boot, where an invalid file is an error
    (ConfigInvalid: the daemon does not start); later changes go through `refresh`."""

    def __init__(self, home: Home) -> None:
        self.path = home.config_path
        self._stamp = _stamp(self.path)
        text = _read(self.path)
        self.config: Config = (
            default_config() if text is None else parse_config(text, str(self.path))
        )
        self.revision = revision_of(text)
        self.loaded_at = time.time()
        self.refused: Refusal | None = None

    def refresh(self) -> bool:
        """Look at the file again; True when a new config was taken. Cheap when unchanged (a stat)."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        text = _read(self.path)
        revision = revision_of(text)
        if revision == self.revision:  # touched, or put back as it was: nothing to take
            self.refused = None
            return False
        try:
            config = default_config() if text is None else parse_config(text, str(self.path))
        except ConfigInvalid as exc:
            self.refused = Refusal(exc.message, exc.field, revision, time.time())
            return False
        self.config, self.revision, self.loaded_at, self.refused = (
            config,
            revision,
            time.time(),
            None,
        )
        return True
