"""One delivery attempt of a notice by a program (`command`, `codex_queue`), and its evidence:
classifier, exit status or errno, duration, byte counts and redacted output tails."""

import asyncio
import fcntl
import json
import os
import shutil
import signal
import struct
import termios
import time
from dataclasses import asdict, dataclass

from pydantic import ValidationError

from agent_run.domain.errors import InvalidRequest
from agent_run.domain.notices import (
    NOTICE_MAX_BYTES,
    Classifier,
    CodexQueueTarget,
    CommandTarget,
    check_target,
    escape_controls,
    summary_line,
)
from agent_run.supervisor.redact import Redactor

TAIL_BYTES = 2048  # each of stdout and stderr: the two tails together stay within 4 KiB
# Kept raw before redaction: a hidden value (an argument, <= 4 KiB) cut by the window's start
# is never in the tail.
KEPT_BYTES = TAIL_BYTES + 2 * NOTICE_MAX_BYTES
CODEX_QUEUE_TIMEOUT_SECONDS = 60.0
# What a notice program inherits from the daemon: never its whole environment (keys live there).
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")


@dataclass
class Evidence:
    classifier: str
    duration_seconds: float
    exit_status: int | None = None
    errno: int | None = None
    error: str | None = None
    stdin_bytes: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_tail: str = ""
    stderr_tail: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @property
    def summary(self) -> str | None:
        """The attempt's error in a line (None on success)."""
        if self.classifier == Classifier.SUCCESS:
            return None
        if self.classifier == Classifier.EXIT:
            return f"the program exited with status {self.exit_status}"
        if self.classifier == Classifier.TIMEOUT:
            return f"the program was killed after {self.duration_seconds:.1f}s (timeout)"
        if self.classifier == Classifier.RECEIVED_TIMEOUT:
            return (
                f"the program read the whole notice, then was killed after "
                f"{self.duration_seconds:.1f}s (timeout): delivered, not sent again"
            )
        if self.classifier == Classifier.ERROR:
            return f"the send failed inside agent-run: {self.error}"
        return f"the program could not be started: {self.error}"


def _tail(data: bytes, redact: Redactor) -> str:
    """The last TAIL_BYTES bytes (UTF-8) of the output, redacted, its control characters but
    newlines and tabs escaped (JSON carries those; an escape sequence never reaches a terminal);
    a character the cut splits is dropped."""
    text = escape_controls(redact(data.decode("utf-8", errors="replace")), keep="\n\t")
    return text.encode()[-TAIL_BYTES:].decode("utf-8", errors="ignore")


def _environment(extra: dict[str, str]) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    return env | extra


# After the program exits, how long its output may take to end: a child it left holding stdout
# or stderr does not keep the attempt (or the notice) waiting.
OUTPUT_GRACE_SECONDS = 0.5


async def run_program(
    argv: list[str], stdin: bytes, timeout: float, env: dict[str, str], hidden: list[str]
) -> Evidence:
    """Run `argv` in its own process group with `stdin`; kill the group at `timeout`. The
    program's own exit decides the outcome: its output is read until it ends, at most
    OUTPUT_GRACE_SECONDS past that exit. `hidden` (argv values, the thread id, which may carry
    a secret) never reaches the evidence's tails; the notice, trusted fields only and shown as
    the status's `body`, may (a receiver that echoes it shows it as received)."""
    redact = Redactor([value for value in hidden if value])
    started = time.monotonic()
    pipes = _Pipes(stdin)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=pipes.child_stdin,
            stdout=pipes.child_stdout,
            stderr=pipes.child_stderr,
            env=env,
            start_new_session=True,
        )
    except BaseException as exc:
        pipes.close()
        if not isinstance(exc, OSError):
            raise
        return Evidence(
            Classifier.SPAWN,
            time.monotonic() - started,
            errno=exc.errno,
            error=escape_controls(redact(exc.strerror or type(exc).__name__)),
        )
    out, err = _Output(), _Output()
    reading = await pipes.read_into(out, err)
    classifier = Classifier.TIMEOUT
    try:
        await asyncio.wait_for(proc.wait(), timeout)
        classifier = Classifier.SUCCESS if proc.returncode == 0 else Classifier.EXIT
    except TimeoutError:
        # A receiver slower than its timeout that took the notice in has it: sending it again
        # would hand it the same notice on every attempt (the notice is on stdin; codex_queue's
        # is in argv, where nothing says it was read).
        if stdin and pipes.unread_stdin() == 0:
            classifier = Classifier.RECEIVED_TIMEOUT
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
    duration = time.monotonic() - started  # the program's run, not the output's grace
    await asyncio.wait(reading, timeout=OUTPUT_GRACE_SECONDS)
    pipes.close()  # a reader still pending sees its pipe closed (a lingering child's EPIPE)
    await asyncio.gather(*reading, return_exceptions=True)
    return _evidence(classifier, duration, proc.returncode, stdin, out, err, redact)


class _Pipes:
    """The program's stdin (`stdin` written in full up front: a notice fits in a pipe's buffer)
    and its stdout and stderr, read by this process. Plain descriptors, not asyncio's pipes, so
    waiting for the program is waiting for its exit, never for its pipes to close."""

    def __init__(self, stdin: bytes) -> None:
        self.child_stdin, stdin_w = os.pipe()
        self.stdin_probe = os.dup(self.child_stdin)  # how much of stdin is still unread
        self.out_r, self.child_stdout = os.pipe()
        self.err_r, self.child_stderr = os.pipe()
        self.transports: list[asyncio.BaseTransport] = []
        try:
            os.set_blocking(stdin_w, False)
            os.write(stdin_w, stdin)  # <= 4 KiB + 1 (a pipe holds 64 KiB): never blocks
        except BlockingIOError:  # pragma: no cover - a notice is bounded far below a pipe
            pass
        finally:
            os.close(stdin_w)

    async def read_into(self, out: "_Output", err: "_Output") -> list[asyncio.Future[None]]:
        """Close the child's ends here and start reading ours."""
        for fd in (self.child_stdin, self.child_stdout, self.child_stderr):
            os.close(fd)
        self.child_stdin = self.child_stdout = self.child_stderr = -1
        loop = asyncio.get_running_loop()
        reading = []
        for fd, sink in ((self.out_r, out), (self.err_r, err)):
            reader = asyncio.StreamReader(loop=loop)
            transport, _ = await loop.connect_read_pipe(
                lambda reader=reader: asyncio.StreamReaderProtocol(reader, loop=loop),
                os.fdopen(fd, "rb", buffering=0),
            )
            self.transports.append(transport)
            reading.append(asyncio.ensure_future(sink.drain(reader)))
        self.out_r = self.err_r = -1
        return reading

    def unread_stdin(self) -> int:
        """Bytes of stdin the program has not read yet (FIONREAD on the pipe)."""
        return int(
            struct.unpack("i", fcntl.ioctl(self.stdin_probe, termios.FIONREAD, b"\0" * 4))[0]
        )

    def close(self) -> None:
        for transport in self.transports:
            transport.close()
        fds = (self.child_stdin, self.child_stdout, self.child_stderr, self.out_r, self.err_r)
        for fd in (*fds, self.stdin_probe):
            if fd >= 0:
                os.close(fd)
        self.stdin_probe = -1


class _Output:
    """A stream's byte count and its last TAIL_BYTES, read as it comes (kept on a timeout)."""

    def __init__(self) -> None:
        self.count, self.tail = 0, b""

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.count += len(chunk)
            self.tail = (self.tail + chunk)[-KEPT_BYTES:]


def _evidence(
    classifier: Classifier,
    duration: float,
    status: int | None,
    stdin: bytes,
    out: "_Output",
    err: "_Output",
    redact: Redactor,
) -> Evidence:
    return Evidence(
        classifier,
        round(duration, 3),
        exit_status=status,
        stdin_bytes=len(stdin),
        stdout_bytes=out.count,
        stderr_bytes=err.count,
        stdout_tail=_tail(out.tail, redact),
        stderr_tail=_tail(err.tail, redact),
    )


def failure_evidence(exc: Exception, started: float, hidden: list[str]) -> Evidence:
    """An attempt that raised inside agent-run: what was raised, redacted and bounded, so the
    notice moves on (retried, then `failed`) instead of staying `sending`."""
    if isinstance(exc, ValidationError):  # its text quotes the input: name the fields only
        text = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False)
        )
    else:
        text = str(exc)
    # A value may be quoted as its repr (escaped), so hide that form too.
    hidden = [form for value in hidden if value for form in (value, repr(value)[1:-1])]
    error = escape_controls(Redactor(hidden)(f"{type(exc).__name__}: {text}"))[:300]
    return Evidence(Classifier.ERROR, round(time.monotonic() - started, 3), error=error)


async def send_command(target: CommandTarget, body: str) -> Evidence:
    """The notice JSON on the program's stdin (and its id in AGENT_RUN_NOTICE_ID)."""
    notice_id = json.loads(body)["notice_id"]
    return await run_program(
        list(target.argv),
        body.encode() + b"\n",
        target.timeout_seconds,
        _environment({"AGENT_RUN_NOTICE_ID": notice_id}),
        list(target.argv[1:]),
    )


def check_notify(target: object) -> None:
    """A notify target, at admission: what its model cannot say alone (`check_target`), and
    that its program can be started by this daemon (a path that is an executable file, or a
    name on the daemon's PATH): a typo would otherwise surface only when the agent ends."""
    check_target(target)
    if isinstance(target, CommandTarget):
        program, field = target.argv[0], "notify.command.argv"
    elif isinstance(target, CodexQueueTarget):
        program, field = target.binary or "codex", "notify.codex_queue.binary"
    else:
        return
    if "/" in program:
        found = os.path.isfile(program) and os.access(program, os.X_OK)
    else:
        found = shutil.which(program) is not None
    if not found:
        where = "is not an executable file" if "/" in program else "is not on the daemon's PATH"
        raise InvalidRequest(
            f"the notice program {program!r} {where}: give an absolute path to an executable, "
            "or a program on the PATH of the daemon (`agent-run doctor` shows it)",
            field=field,
        )


async def send_codex_queue(target: CodexQueueTarget, body: str) -> Evidence:
    """`codex queue --thread ID --message TEXT` with the orchestrator's own binary and home:
    Codex adds the text as a user message before that thread's next turn."""
    message = summary_line(json.loads(body)) + "\n" + body
    binary = target.binary or shutil.which("codex") or "codex"
    extra = {"CODEX_HOME": target.codex_home} if target.codex_home else {}
    argv = [binary, "queue", "--thread", target.thread_id, "--message", message]
    return await run_program(
        argv,
        b"",
        CODEX_QUEUE_TIMEOUT_SECONDS,
        _environment(extra),
        [target.thread_id, *(extra.values())],
    )
