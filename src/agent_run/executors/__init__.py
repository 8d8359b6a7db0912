"""The executor seam: where an execution's supervisor runs and how the daemon reaches it.

`LocalExecutor` (`executors/local.py`) is this machine: a detached supervisor started by the
fork server or a spawn, probed by process identity. `SshExecutor` (`executors/ssh.py`) is a
`[hosts.NAME]`: the host's own agent-run daemon, reached through `ssh HOST agent-run api
bridge`, whose record is mirrored into the local store (`executors/mirror.py`). Both answer
the same operations; docs/scaling.md maps them, and onto a cluster engine on paper.
"""

from enum import StrEnum
from typing import Any, Protocol


class Probe(StrEnum):
    """What an executor can say of an execution's supervisor right now."""

    ALIVE = "alive"  # it runs (or its host's record says it still lives)
    DEAD = "dead"  # proven gone: exited, killed, a zombie, another boot, or ended on its host
    REUSED = "reused"  # its pid now belongs to another process (another start stamp): proven gone
    UNKNOWN = "unknown"  # no proof either way (an unreadable process table, an unreachable host)

    @property
    def proves_end(self) -> bool:
        """Only a proof ends an execution: unknown is never death."""
        return self in (Probe.DEAD, Probe.REUSED)


class Executor(Protocol):
    """What every executor answers for an admitted execution (docs/scaling.md has the whole
    table: a host's executor also prepares workspaces, forwards commands, reads events, fetches
    answers, collects diffs and cleans up; this machine's does those in place)."""

    name: str

    async def spawn(self, agent_id: str, execution_id: str) -> None:
        """Start the execution's supervisor (idempotent: a second spawn runs nothing twice)."""
        ...

    async def probe(self, row: Any) -> Probe: ...


__all__ = ["Executor", "Probe"]
