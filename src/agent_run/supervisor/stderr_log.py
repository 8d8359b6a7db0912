"""The engine's stderr, read from a pipe by its own thread and stored redacted in `engine.log`.

A thread drains the pipe whatever the supervisor's main loop is doing (a slow database write
included), so the engine never blocks on a full stderr pipe. It keeps draining whatever the
disk does: what a full disk (or any write error) keeps out of `engine.log` is counted and
said once in the supervisor's log, and the end of the stream is kept in memory too, so the
supervisor can still read why the engine ended (`tail`).
"""

import codecs
import os
import threading
from pathlib import Path

from agent_run.supervisor.redact import Redactor, StreamRedactor
from agent_run.supervisor.storage import note

READ_BYTES = 65536
JOIN_SECONDS = 5.0
KEPT_CHARS = 8000  # the end of the stream held in memory, whatever reached engine.log


class StderrLog:
    def __init__(self, fd: int, path: Path, redact: Redactor) -> None:
        self.fd = fd
        self.path = path
        self.stream = StreamRedactor(redact)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.kept = ""  # the last KEPT_CHARS read (redacted)
        self.unstored = 0  # bytes that could not be written to engine.log
        self.error: OSError | None = None  # the first write error, said once
        self.thread = threading.Thread(target=self._drain, daemon=True, name="engine-stderr")

    def start(self) -> "StderrLog":
        self.thread.start()
        return self

    def _drain(self) -> None:
        log = self._open()
        try:
            while True:
                try:
                    chunk = os.read(self.fd, READ_BYTES)
                except OSError:
                    chunk = b""
                text = self.stream.feed(self.decoder.decode(chunk, final=not chunk))
                if not chunk:
                    text += self.stream.close()
                self.kept = (self.kept + text)[-KEPT_CHARS:]
                log = self._store(log, text.encode())
                if not chunk:
                    break
        finally:
            if log is not None:
                os.close(log)

    def _open(self) -> int | None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            self._failed(exc)
            return None
        os.fchmod(fd, 0o600)
        return fd

    def _store(self, log: int | None, data: bytes) -> int | None:
        """Append `data` to engine.log (opening it again if it could not be opened before);
        what cannot be written is counted, and the next chunk tries again."""
        if log is None and data:
            log = self._open()
        view = memoryview(data)
        try:
            while view and log is not None:
                view = view[os.write(log, view) :]
        except OSError as exc:
            self._failed(exc)
        self.unstored += len(view)
        return log

    def _failed(self, exc: OSError) -> None:
        if self.error is None:
            self.error = exc
            note(
                f"engine.log: {exc.strerror or exc}; the engine's stderr is still read (its end "
                "kept in memory), what cannot be written is dropped"
            )

    def join(self) -> None:
        """Wait for the end of stderr (every holder of the pipe closed it), within a bound."""
        self.thread.join(JOIN_SECONDS)

    def tail(self, size: int = 2000) -> str:
        """The last `size` characters read (already redacted), stored or not."""
        return self.kept[-size:]
