"""The engine's stderr, read from a pipe by its own thread and stored redacted in `engine.log`.

A thread drains the pipe whatever the supervisor's main loop is doing (a slow database write
included), so the engine never blocks on a full stderr pipe.
"""

import codecs
import os
import threading
from pathlib import Path

from agent_run.supervisor.redact import Redactor, StreamRedactor

READ_BYTES = 65536
JOIN_SECONDS = 5.0


class StderrLog:
    def __init__(self, fd: int, path: Path, redact: Redactor) -> None:
        self.fd = fd
        self.path = path
        self.stream = StreamRedactor(redact)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.thread = threading.Thread(target=self._drain, daemon=True, name="engine-stderr")

    def start(self) -> "StderrLog":
        self.thread.start()
        return self

    def _drain(self) -> None:
        with open(self.path, "a", encoding="utf-8") as log:
            os.chmod(self.path, 0o600)
            while True:
                try:
                    chunk = os.read(self.fd, READ_BYTES)
                except OSError:
                    chunk = b""
                text = self.decoder.decode(chunk, final=not chunk)
                log.write(
                    self.stream.feed(text)
                    if chunk
                    else self.stream.feed(text) + self.stream.close()
                )
                log.flush()
                if not chunk:
                    break

    def join(self) -> None:
        """Wait for the end of stderr (every holder of the pipe closed it), within a bound."""
        self.thread.join(JOIN_SECONDS)

    def tail(self, size: int = 2000) -> str:
        """The last `size` bytes stored (already redacted)."""
        if not self.path.exists():
            return ""
        with open(self.path, "rb") as log:
            log.seek(max(0, self.path.stat().st_size - size))
            return log.read().decode("utf-8", errors="replace")
