"""`LocalExecutor`: an execution's supervisor on this machine (today's launch path, unchanged).

Spawn: the credential payload resolved now, the supervisor forked by the fork server or spawned
(on a spawn thread), its ready line awaited on the event loop. Probe: the recorded identity
(boot id, pid, start stamp) against the process table. Signals go through the durable command
queue the supervisor polls; reconciliation kills a lost execution's engine group by identity.
"""

import sqlite3
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from agent_run.executors import Probe
from agent_run.supervisor.identity import Liveness, ProcessIdentity, liveness
from agent_run.supervisor.launch import StartedSupervisor, await_ready, start_supervisor
from agent_run.supervisor.secrets import secret_payload
from agent_run.system.home import Home
from agent_run.system.processes import current as current_processes

T = TypeVar("T")


class LocalDaemon(Protocol):
    """What the local executor needs of the daemon (its ServiceContext)."""

    home: Home
    fork_server: Any
    supervisors_starting: Any  # an asyncio.Semaphore: supervisors booting at once

    async def db(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def spawn(self, fn: Callable[..., T], *args: Any) -> T: ...


def probe_identity(row: sqlite3.Row | dict[str, Any]) -> Probe:
    """The recorded supervisor of an execution row, against the process table now."""
    identity = ProcessIdentity(row["supervisor_pid"], row["supervisor_start_ticks"], row["boot_id"])
    found = liveness(identity)
    if found is Liveness.ALIVE:
        return Probe.ALIVE
    if found is Liveness.UNKNOWN:
        return Probe.UNKNOWN
    table = current_processes()
    now = table.start_time(identity.pid)
    same_boot = table.boot_id() == identity.boot_id
    return (
        Probe.REUSED
        if same_boot and now is not None and now != identity.start_ticks
        else Probe.DEAD
    )


class LocalExecutor:
    """This machine's executor."""

    name = "local"

    def __init__(self, daemon: LocalDaemon) -> None:
        self.daemon = daemon

    async def spawn(self, agent_id: str, execution_id: str) -> None:
        """Start the execution's supervisor and wait until it is ready (took the row). Raises
        SpawnFailed when it exited first or did not report in time."""
        daemon = self.daemon

        def start(payload: bytes) -> StartedSupervisor:
            directory = daemon.home.execution_dir(agent_id, execution_id)
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            return start_supervisor(
                daemon.home, execution_id, directory / "supervisor.log", payload, daemon.fork_server
            )

        async with daemon.supervisors_starting:  # bounded: each start is an interpreter boot
            # The credential goes to the supervisor over its stdin, resolved now: a respawn
            # after a daemon restart resolves it again from the new environment.
            payload = await daemon.db(secret_payload, execution_id)
            started = await daemon.spawn(start, payload)
            await await_ready(started)

    async def probe(self, row: sqlite3.Row) -> Probe:
        return probe_identity(row)
