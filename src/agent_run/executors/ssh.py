"""`SshExecutor`'s connections: one `HostLink` per `[hosts.NAME]`, opened on first use, checked
for the host's version at connect, and opened again after it ended (docs/scaling.md).

The registry never decides an agent's fate: a host it cannot reach is `HostUnreachable` (its
agents become `unreachable` through the mirror), never proof of anything."""

import asyncio
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_run.config.hosts import HostConfig
from agent_run.domain import errors
from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState
from agent_run.executors import Probe
from agent_run.executors.link import HostLink
from agent_run.executors.workspace import cleanup, collect_commits, prepare
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store import remote as remote_q
from agent_run.store.db import write


@dataclass(frozen=True)
class Transferred:
    """An answer as received from a host: its text, or why the host could not vouch for it."""

    text: str | None
    failure: str | None = None


@dataclass
class HostState:
    """What the daemon knows of a host's link, for the `hosts` tool."""

    link: HostLink | None = None
    last_error: errors.DomainError | None = None
    last_error_at: float | None = None


class HostRegistry:
    """The daemon's links to its hosts, by name."""

    def __init__(self, hosts: Callable[[], dict[str, HostConfig]], log: Any = None) -> None:
        self._hosts = hosts  # the current config's `hosts` (config.toml may be reloaded)
        self.log = log
        self.states: dict[str, HostState] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def config(self, name: str) -> HostConfig:
        """The host's config; InvalidRequest naming `host` when no such host is configured."""
        hosts = self._hosts()
        found = hosts.get(name)
        if found is None:
            known = ", ".join(sorted(hosts)) or "none"
            raise errors.InvalidRequest(
                f"no host {name!r} in config.toml [hosts] (configured: {known})", field="host"
            )
        return found

    def names(self) -> list[str]:
        return sorted(self._hosts())

    def state(self, name: str) -> HostState:
        return self.states.setdefault(name, HostState())

    async def link(self, name: str) -> HostLink:
        """A connected link to the host, opened now if it has none (or its config changed)."""
        config = self.config(name)
        state = self.state(name)
        if state.link is not None and state.link.connected and state.link.config == config:
            return state.link
        async with self._locks.setdefault(name, asyncio.Lock()):
            state = self.state(name)
            if state.link is not None and state.link.connected and state.link.config == config:
                return state.link
            if state.link is not None:
                await state.link.close()
                state.link = None
            try:
                state.link = await HostLink(name, config, self.log).open()
            except errors.DomainError as exc:
                state.last_error, state.last_error_at = exc, time.time()
                if self.log is not None:
                    self.log.warning(
                        "host.unreachable", host=name, code=exc.code, error=exc.message
                    )
                raise
            state.last_error = None
            if self.log is not None:
                self.log.info(
                    "host.connected",
                    host=name,
                    ssh_pid=state.link.ssh_pid,
                    remote_daemon=state.link.remote_daemon,
                )
            return state.link

    def note_error(self, name: str, exc: errors.DomainError) -> None:
        state = self.state(name)
        state.last_error, state.last_error_at = exc, time.time()

    async def close_all(self) -> None:
        for state in self.states.values():
            if state.link is not None:
                await state.link.close()


def refuse_start(conn: sqlite3.Connection, execution_id: str, message: str) -> None:
    """The host refused the start (its own validation): the execution ends here `failed`."""
    with write(conn, "a start the host refused"):
        row = agents_q.get_execution(conn, execution_id)
        if row["state"] not in (ExecutionState.CREATED, ExecutionState.UNREACHABLE):
            return
        agents_q.transition(
            conn,
            execution_id,
            ExecutionState.FAILED,
            failure_kind=FailureKind.CONFIG_ERROR.value,
            failure_message=message,
        )
        for command in commands_q.pending(conn, execution_id):
            commands_q.resolve(conn, command, state="refused", result="the host refused the start")


class SshExecutor:
    """A host's executor: its own agent-run runs the supervisor; this daemon asks through the
    host's link and mirrors the host's record (`executors/mirror.py`)."""

    def __init__(self, daemon: Any, registry: HostRegistry, host: str) -> None:
        self.daemon = daemon  # db, log: the daemon's ServiceContext
        self.registry = registry
        self.host = host
        self.name = f"ssh:{host}"

    async def spawn(self, agent_id: str, execution_id: str) -> None:
        """Start the execution on the host: its workspace first (a batch run), then the host's
        `start` with request_id = the execution id, so asking again (a dropped link, a daemon
        restarted) finds the same remote agent. An unreachable host leaves the row `created`
        for the host mirror to start later; a start the host refuses ends it `failed`."""
        row = await self.daemon.db(agents_q.get_execution, execution_id)
        placed = await self.daemon.db(remote_q.get, execution_id)
        if row is None or placed is None or placed["remote_agent_id"] is not None:
            return
        plan = json.loads(row["plan_json"])
        params = {**plan["remote_start"], "task": row["prompt"], "request_id": execution_id}
        try:
            link = await self.registry.link(self.host)
            if placed["workspace_json"]:
                workspace = json.loads(placed["workspace_json"])
                params["workdir"] = await self.prepare_workspace(link, workspace)
            view = await link.call("start", params, timeout=120)
        except (errors.HostUnreachable, errors.HostVersionMismatch) as exc:
            self.registry.note_error(self.host, exc)
            if self.daemon.log is not None:
                self.daemon.log.warning(
                    "host.start_deferred",
                    host=self.host,
                    execution_id=execution_id,
                    error=exc.message,
                )
            return
        except errors.DomainError as exc:
            field = f" [{exc.field}]" if exc.field else ""
            await self.daemon.db(
                refuse_start,
                execution_id,
                f"host {self.host} refused the start: {exc.code}{field}: {exc.message}",
            )
            return
        await self.daemon.db(
            _record_remote_agent, execution_id, view["id"], view["execution"]["id"], view["sandbox"]
        )

    async def prepare_workspace(self, link: HostLink, workspace: dict[str, Any]) -> str:
        """A batch run's worktree on the host (the base sent first if needed): its workdir there."""
        return await prepare(link.config, workspace)

    async def read_events(
        self, link: HostLink, agent_id: str, after_seq: int, after_message: int, limit: int
    ) -> dict[str, Any]:
        """The host's record of its agent after the cursors (`mirror_read`: one read there)."""
        page: dict[str, Any] = await link.call(
            "mirror_read",
            {
                "agent_id": agent_id,
                "after_seq": after_seq,
                "after_message": after_message,
                "limit": limit,
            },
            timeout=120,
        )
        return page

    async def fetch_answer(
        self, link: HostLink, agent_id: str, execution: dict[str, Any]
    ) -> Transferred:
        """The host's answer (re-hashed there), hashed again here against the host's proof;
        bytes that do not match are refused (the next pass fetches them again)."""
        try:
            got = await link.call("answer", {"agent_id": agent_id}, timeout=300)
        except errors.AnswerIntegrity as exc:  # the host's own file no longer matches its proof
            return Transferred(None, f"host {self.host}: {exc.message}")
        data = got["text"].encode()
        digest = hashlib.sha256(data).hexdigest()
        if digest != execution["answer_sha256"] or len(data) != execution["answer_bytes"]:
            raise errors.AnswerIntegrity(
                f"the answer received from host {self.host} does not match its proof "
                f"(sha256 {digest[:12]}... != {str(execution['answer_sha256'])[:12]}...)",
                field="agent_id",
            )
        return Transferred(got["text"])

    async def signal(
        self, link: HostLink, agent_id: str, command: sqlite3.Row
    ) -> tuple[str | None, str]:
        """A local command forwarded to the host's queue: (state to resolve it with, or None to
        keep it pending; the result text)."""
        agent = agent_id
        try:
            if command["kind"] == "cancel":  # idempotent there: sent again after a broken link
                done = await link.call("cancel", {"agent_id": agent}, timeout=60)
                return (
                    "delivered" if done["accepted"] else "refused"
                ), f"host {self.host}: {done['message']}"
            text = json.loads(command["payload"])["text"]
            done = await link.call("steer", {"agent_id": agent, "text": text}, timeout=60)
        except errors.HostUnreachable:
            if command["kind"] == "cancel":
                raise  # still pending: forwarded again once the host answers
            return "refused", (
                f"the connection to host {self.host} broke while forwarding this steer: it may or "
                "may not have arrived (the transcript tells)"
            )
        except errors.DomainError as exc:
            return "refused", f"host {self.host}: {exc.code}: {exc.message}"
        state = done["state"] if done["state"] in ("delivered", "refused") else "delivered"
        return state, f"host {self.host}: {done['message']}"

    async def collect_diff(self, link: HostLink, workspace: dict[str, Any]) -> str | None:
        """The run's commits brought back into its local worktree; the new tip, if any."""
        return await collect_commits(link.config, workspace)

    async def cleanup(self, workspace: dict[str, Any]) -> None:
        """The run's worktree and branch on the host (its batch folder once empty)."""
        await cleanup(self.registry.config(self.host), workspace)

    async def probe(self, row: sqlite3.Row) -> Probe:
        """The host's record of the execution: alive while it is live there, dead once it ended
        there (its state is the proof), unknown when the host cannot be asked."""
        placed = await self.daemon.db(remote_q.get, row["id"])
        if placed is None or placed["remote_agent_id"] is None:
            return Probe.UNKNOWN
        try:
            link = await self.registry.link(self.host)
            view = await link.call("agent", {"agent_id": placed["remote_agent_id"]}, timeout=30)
        except errors.DomainError:
            return Probe.UNKNOWN
        return Probe.DEAD if ExecutionState(view["state"]).terminal else Probe.ALIVE


def _record_remote_agent(
    conn: sqlite3.Connection,
    execution_id: str,
    agent_id: str,
    remote_execution_id: str,
    sandbox: str,
) -> None:
    """The host's agent for the execution, and its runtime's sandbox (the views show it)."""
    with write(conn, "the agent a host made for an execution"):
        remote_q.set_remote_agent(conn, execution_id, agent_id, remote_execution_id)
        conn.execute(
            "UPDATE executions SET plan_json = json_set(plan_json, '$.runtime_config.sandbox', ?)"
            " WHERE id = ?",
            (sandbox, execution_id),
        )
