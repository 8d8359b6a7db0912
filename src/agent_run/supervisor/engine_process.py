"""The engine child as the supervisor holds it: its stdin, its process group, and the
TERM-then-KILL escalation and reaping that prove the group gone."""

import signal
import subprocess
import time
from dataclasses import dataclass

from agent_run.engines.base import LaunchSpec
from agent_run.supervisor.identity import (
    ProcessIdentity,
    engine_group_alive,
    group_members,
    kill_group,
    reap_group_zombies,
)
from agent_run.system.processes.base import no_such_group

KILL_WAIT_SECONDS = 5.0
# How long an ended engine's group may take to end by itself before what is left is killed and
# reported: bubblewrap's init ends a few ms after the bwrap that reported its exit.
SETTLE_SECONDS = 0.2


@dataclass
class Escalation:
    """When to TERM the group (a grace after the native interrupt), and a grace later, KILL."""

    term_at: float
    grace: float
    sent_term: bool = False
    sent_kill: bool = False


class EngineProcess:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pgid = proc.pid  # started with start_new_session: its own group
        self.identity = ProcessIdentity.of(proc.pid)

    @classmethod
    def start(cls, spec: LaunchSpec) -> "EngineProcess":
        """Start the engine in its own session; stdout and stderr are pipes (OSError if it cannot)."""
        return cls(
            subprocess.Popen(
                spec.argv,
                env=spec.env,
                cwd=spec.cwd,
                start_new_session=True,
                stdin=subprocess.PIPE if spec.stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )

    def stderr_fd(self) -> int:
        assert self.proc.stderr is not None
        return self.proc.stderr.fileno()

    # -- stdin -------------------------------------------------------------------------------

    def stdin_open(self) -> bool:
        return bool(self.proc.stdin and not self.proc.stdin.closed)

    def write(self, data: bytes) -> None:
        if not self.stdin_open():
            return
        try:
            self.proc.stdin.write(data)  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:  # the engine went away (BrokenPipeError included)
            self.close_stdin()

    def close_stdin(self) -> None:
        if self.stdin_open():
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass

    # -- stopping ----------------------------------------------------------------------------

    def escalate(self, escalation: Escalation, now: float) -> None:
        if not escalation.sent_term and now >= escalation.term_at:
            escalation.sent_term = True
            kill_group(self.pgid, signal.SIGTERM)
        elif (
            escalation.sent_term
            and not escalation.sent_kill
            and now >= escalation.term_at + escalation.grace
        ):
            escalation.sent_kill = True
            kill_group(self.pgid, signal.SIGKILL)

    def wait(self, grace: float) -> int | None:
        """Wait for the engine leader after its output ended; kill the group if it lingers."""
        try:
            return self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill_group(self.pgid, signal.SIGKILL)
            return self.proc.wait()

    def reap_group(self, settle: float = SETTLE_SECONDS) -> tuple[bool, list[int]]:
        """Kill whatever is left of the group: (proven gone, the pids that had survived). Called
        once the leader was waited for. A group that ends by itself within `settle` seconds
        (bubblewrap's own init still tearing its namespaces down as its parent exits) had no
        survivors; its members that are ours (the supervisor is their subreaper) are reaped as
        they end, so that is known by the kernel's word, without a scan of the process table."""
        if self._ends_within(settle) or not self._alive():
            return True, []
        survivors = group_members(self.pgid)
        kill_group(self.pgid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._alive(), survivors

    def _ends_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            reap_group_zombies(self.pgid)
            if no_such_group(self.pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def _alive(self) -> bool:
        reap_group_zombies(self.pgid)
        return engine_group_alive(self.pgid, self.identity)
