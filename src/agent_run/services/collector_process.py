"""One bounded run of a capacity source's program (a `command` collector, a `codex app-server`):
its input written, its output read as it comes, and an end at whichever comes first of its
exit, its deadline, its output cap, or the caller having all it asked for. Never a wait for the
end of its output: a child the program left holding stdout (detached, in a session of its own)
would hold that open for as long as it lives.

The program runs under `agent_run.system.processes.reaper`, which ends every process it leaves behind
(a child subreaper: a new session does not escape it); the daemon's descriptors are plain ones,
not asyncio's pipes, so waiting for the reaper is waiting for its exit alone."""

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

REAPER = [sys.executable, "-m", "agent_run.system.processes.reaper"]
STOP_GRACE_SECONDS = 5.0  # after SIGTERM, how long the reaper may take to end what is left
REAPER_ERROR_CAP = 4096
NOT_STARTED = 127  # the reaper's status when the program could not be started

Ending = Literal["exited", "deadline", "over_cap", "done"]


@dataclass
class Run:
    """What a bounded run gave: its output, how it ended, the program's exit status (None when
    it was stopped), and why it could not start (the reaper's word)."""

    output: bytes
    ending: Ending
    status: int | None
    start_error: str | None = None


@dataclass
class _Reader:
    """A non-blocking descriptor read as data arrives, up to `cap` bytes."""

    fd: int
    cap: int
    done: Callable[[bytes], bool] | None = None
    data: bytearray = field(default_factory=bytearray)
    over_cap: bool = False
    finished: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def pull(self) -> None:
        """Read what is there now (until it would block, or its end)."""
        while not self.over_cap:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.data += chunk
            if len(self.data) > self.cap:
                self.over_cap = True
            elif self.done is not None and self.done(chunk):
                self.finished = True
            if self.over_cap or self.finished:
                self.wake.set()
                return


class _Input:
    """The program's input, written as it reads it; closed once, whatever asks first."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def feed(self, data: bytes, then_close: bool) -> None:
        """Write `data` (a program that stops reading ends the feeding, never the run)."""
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view and self.fd >= 0:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                fd, ready = self.fd, loop.create_future()
                loop.add_writer(fd, _settle, ready)
                try:
                    await ready
                finally:
                    loop.remove_writer(fd)
            except OSError:  # EPIPE: it closed its input
                break
        if then_close:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _settle(ready: "asyncio.Future[None]") -> None:
    if not ready.done():
        ready.set_result(None)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the reaper (it ends the program and every descendant); its group killed if it
    takes longer than STOP_GRACE_SECONDS."""
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE_SECONDS)
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()


async def run_bounded(
    argv: list[str],
    stdin: bytes,
    env: dict[str, str],
    deadline: float,
    cap: int,
    *,
    keep_input_open: bool = False,
    done: Callable[[bytes], bool] | None = None,
) -> Run:
    """Run `argv` under the reaper with `stdin` (its input closed after it, unless
    `keep_input_open`: then until the run ends). `done(chunk)` is told each chunk of output and
    says when the caller has all it wants. OSError/ValueError when the reaper cannot start."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *REAPER, *argv, stdin=in_r, stdout=out_w, stderr=err_w, env=env, start_new_session=True
        )
    except BaseException:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    for fd in (in_w, out_r, err_r):
        os.set_blocking(fd, False)
    given = _Input(in_w)
    out, err = _Reader(out_r, cap, done), _Reader(err_r, REAPER_ERROR_CAP)
    try:
        ending = await _watch(proc, out, err, given.feed(stdin, not keep_input_open), deadline)
    finally:
        given.close()
        os.close(out_r)
        os.close(err_r)
    status = proc.returncode if ending == "exited" else None
    start_error = err.data.decode(errors="replace").strip() if status == NOT_STARTED else None
    return Run(bytes(out.data), ending, status, start_error or None)


async def _watch(
    proc: asyncio.subprocess.Process,
    out: _Reader,
    err: _Reader,
    feeding: Coroutine[Any, Any, None],
    deadline: float,
) -> Ending:
    """Feed, read and wait until the run ends; stop the reaper unless it exited by itself."""
    loop = asyncio.get_running_loop()
    loop.add_reader(out.fd, out.pull)
    loop.add_reader(err.fd, err.pull)
    tasks = [asyncio.ensure_future(c) for c in (feeding, proc.wait(), out.wake.wait())]
    _, exited, woken = tasks
    try:
        await asyncio.wait({exited, woken}, timeout=deadline, return_when="FIRST_COMPLETED")
        out.pull()  # what the program wrote before it exited is in the pipe now: take it all
        err.pull()
        if out.over_cap:
            ending: Ending = "over_cap"
        elif out.finished:
            ending = "done"
        else:
            ending = "exited" if exited.done() else "deadline"
        if not exited.done():
            await _stop(proc)
        return ending
    finally:
        loop.remove_reader(out.fd)
        loop.remove_reader(err.fd)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # before the descriptors close
