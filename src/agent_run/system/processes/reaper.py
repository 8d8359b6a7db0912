"""Run a program and end every process it leaves behind:
`python -m agent_run.system.processes.reaper PROGRAM ARGS...`.

The program gets this process's stdin and stdout (this process keeps no copy of either, so its
reader sees their end when the program and what it started are gone); its stderr goes to
/dev/null. This process becomes the child subreaper of the program's descendants where the
platform has one (Linux), so a child that left the program's process group or session is
still its to find. When the program exits, or this process gets SIGTERM, every descendant
still there is killed and reaped. Exit status: the program's (128 + N for signal N); 127 when
it could not be started (why, on this process's stderr); 143 on SIGTERM.

A capacity collector that exits leaving a detached child holding its stdout would otherwise
keep its reader waiting for an end of output that never comes (docs/capacity.md, "Sources")."""

import os
import signal
import subprocess
import sys
from types import FrameType

from agent_run.system.processes import current

STOPPED_STATUS = 128 + signal.SIGTERM


class _Stopped(Exception):
    """SIGTERM: stop waiting for the program."""


class _Stop:
    """SIGTERM's handler: noted while the program starts (an exception then would lose it),
    raised once this process waits for it."""

    def __init__(self) -> None:
        self.asked = self.waiting = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.asked = True
        if self.waiting:
            raise _Stopped


def end_descendants() -> None:
    """Kill this process's children until none is left: each one killed hands its own children
    to this process (a subreaper), which the next round kills in turn."""
    table = current()
    while True:
        for pid in table.children(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _status(code: int) -> int:
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    current().adopt_orphans()
    try:
        program = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        sys.stderr.write(f"could not start {argv[0] if argv else '(nothing)'}: {reason}\n")
        return 127
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the program's ends only: its reader sees EOF once it and its kin are gone
        os.dup2(quiet, fd)
    os.close(quiet)
    try:
        stop.waiting = True
        if stop.asked:
            raise _Stopped
        status = _status(program.wait())
    except _Stopped:
        status = STOPPED_STATUS
    finally:
        stop.waiting = False  # the cleanup is not cut short
    end_descendants()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
