"""The host mirror: one loop per host with live executions, copying the host's record of each
into the local store, so local views, `wait`, `transcript --follow`, batches and the web UI read
a remote agent as they read a local one (docs/scaling.md).

Each pass reads one page per execution from the host (`mirror_read`: events and messages after
the cursors, the execution now) and writes it here in one transaction together with the new
cursors: a connection dropped anywhere resumes from the committed cursor, so every host event
is copied exactly once. A host state event becomes the local transition; at the end the answer
is fetched, re-hashed here and sealed in the local home, the worker-tool reports are copied and
a batch run's commits brought back. Pending cancel and steer commands are forwarded to the
host's own command queue. An unreachable host proves nothing: its executions become
`unreachable` until its record says what happened.
"""

import asyncio
import json
import sqlite3
import time
from typing import Any, Protocol

from agent_run.domain import errors
from agent_run.domain.states import ExecutionState, can_transition
from agent_run.executors.ssh import HostRegistry, SshExecutor, Transferred
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store import remote as remote_q
from agent_run.store.db import write
from agent_run.store.events import append_event, append_message
from agent_run.supervisor.seal import read_verified_answer, seal_answer
from agent_run.system.home import Home

PAGE = 500
CHANGES_WAIT_SECONDS = 1.0  # one long-poll of the host; a local command wakes the loop sooner
RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)  # pacing of reconnection attempts (never evidence of death)


class MirrorDaemon(Protocol):
    home: Home
    starting: set[str]
    log: Any
    watcher: Any  # services.context.RevisionWatcher: the local revision

    async def db(self, fn: Any, *args: Any) -> Any: ...


# -- writing a page ---------------------------------------------------------------------------


def _terminal_fields(
    execution: dict[str, Any], sealed: Any, answer: Transferred | None
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "failure_kind": execution["failure_kind"],
        "failure_message": execution["failure_message"],
        "exit_code": execution["exit_code"],
        "verdict": execution["verdict"],
        "engine_session_id": execution["engine_session_id"],
        "usage_json": json.dumps(execution["usage"]) if execution["usage"] else None,
        "cost_usd": execution["cost_usd"],
        "ended_at": execution["ended_at"] or time.time(),
    }
    if sealed is not None:
        fields.update(
            answer_path=str(sealed.path),
            answer_sha256=sealed.sha256,
            answer_bytes=sealed.bytes,
            answer_checked_at=time.time(),
        )
    elif answer is not None and answer.failure is not None:  # the host's own re-hash failed
        fields.update(
            answer_sha256=execution["answer_sha256"],
            answer_bytes=execution["answer_bytes"],
            answer_checked_at=time.time(),
            integrity_failed_at=time.time(),
        )
    return fields


def _apply_state(
    conn: sqlite3.Connection,
    row: sqlite3.Row,
    event: dict[str, Any],
    execution: dict[str, Any],
    sealed: Any,
    answer: Transferred | None,
) -> None:
    """A host state event: the same local transition (one event, carrying `remote_seq`)."""
    target = ExecutionState(event["data"]["state"])
    local = ExecutionState(agents_q.get_execution(conn, row["id"])["state"])
    data = {**event["data"], "remote_seq": event["agent_seq"]}
    if target is local:
        append_event(
            conn,
            agent_id=row["agent_id"],
            execution_id=row["id"],
            kind="state",
            data=data,
            ts=event["ts"],
        )
        return
    if not can_transition(local, target):  # kept as a record; the local state stays
        data["not_applied"] = local.value
        append_event(
            conn,
            agent_id=row["agent_id"],
            execution_id=row["id"],
            kind="state",
            data=data,
            ts=event["ts"],
        )
        return
    fields = _terminal_fields(execution, sealed, answer) if target.terminal else {}
    agents_q.transition(
        conn, row["id"], target, event_extra={"remote_seq": event["agent_seq"]}, **fields
    )
    if target.terminal and answer is not None and answer.failure is not None:
        append_event(
            conn,
            agent_id=row["agent_id"],
            execution_id=row["id"],
            kind="integrity_failed",
            data={"by": "transfer", "message": answer.failure[:500]},
        )
    if target.terminal:
        for command in commands_q.pending(conn, row["id"]):
            commands_q.resolve(conn, command, state="refused", result=f"the agent {target.value}")


def _copy_reports(
    conn: sqlite3.Connection, row: sqlite3.Row, reports: list[dict[str, Any]]
) -> None:
    """The ended execution's worker-tool reports (what the batch judge reads), once."""
    if conn.execute(
        "SELECT 1 FROM tool_reports WHERE execution_id = ? LIMIT 1", (row["id"],)
    ).fetchone():
        return
    for report in reports:
        conn.execute(
            "INSERT INTO tool_reports (agent_id, execution_id, tool, payload, ts) VALUES (?, ?, ?, ?, ?)",
            (
                row["agent_id"],
                row["id"],
                report["tool"],
                json.dumps(report["payload"]),
                report["ts"],
            ),
        )


def _live_fields(conn: sqlite3.Connection, row: sqlite3.Row, execution: dict[str, Any]) -> None:
    """What the host's execution reports while it runs (its session, usage, cost, verdict)."""
    now = agents_q.get_execution(conn, row["id"])
    fields = {
        "started_at": execution["started_at"],
        "engine_session_id": execution["engine_session_id"],
        "usage_json": json.dumps(execution["usage"]) if execution["usage"] else None,
        "cost_usd": execution["cost_usd"],
        "verdict": execution["verdict"],
    }
    changed = {name: value for name, value in fields.items() if now[name] != value}
    if changed and not ExecutionState(now["state"]).terminal:
        agents_q.update_execution(conn, row["id"], **changed)


def write_page(
    conn: sqlite3.Connection,
    home: Home,
    row: sqlite3.Row,
    page: dict[str, Any],
    answer: Transferred | None,
) -> bool:
    """Copy one page of the host's record, with the new cursors, in one transaction. False when
    the cursors moved meanwhile (the page was copied already): nothing is written twice."""
    sealed = None
    if answer is not None and answer.text is not None:  # the file first, as a supervisor does
        directory = home.execution_dir(row["agent_id"], row["id"])
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        sealed = seal_answer(
            directory, answer.text, agent_id=row["agent_id"], execution_id=row["id"]
        )
        read_verified_answer(sealed.path, sealed.sha256, sealed.bytes)  # what is on disk
    execution = page["execution"]
    with write(conn, "a host's mirrored record"):
        cursor = remote_q.get(conn, row["id"])
        if cursor["event_seq"] != row["event_seq"] or cursor["message_id"] != row["message_id"]:
            return False
        event_seq, message_id = row["event_seq"], row["message_id"]
        for event in page["events"]:
            if event["kind"] == "state":
                _apply_state(conn, row, event, execution, sealed, answer)
            else:
                append_event(
                    conn,
                    agent_id=row["agent_id"],
                    execution_id=row["id"],
                    kind=event["kind"],
                    data={**event["data"], "remote_seq": event["agent_seq"]},
                    ts=event["ts"],
                )
            event_seq = event["agent_seq"]
        for message in page["messages"]:
            append_message(
                conn,
                agent_id=row["agent_id"],
                execution_id=row["id"],
                role=message["role"],
                name=message["name"],
                content=message["content"],
                ts=message["ts"],
                is_error=message["is_error"],
            )
            message_id = message["id"]
        _live_fields(conn, row, execution)
        ended = ExecutionState(agents_q.get_execution(conn, row["id"])["state"]).terminal
        if ended and page["reports"] is not None:
            _copy_reports(conn, row, page["reports"])
        remote_q.advance(conn, row["id"], event_seq, message_id)
    return True


# -- reachability -------------------------------------------------------------------------------


def mark_unreachable(conn: sqlite3.Connection, host: str, reason: str) -> list[str]:
    """Every execution the host has (a remote agent exists) and that is live here becomes
    `unreachable`: not terminal, never lost. The ids moved."""
    moved = []
    with write(conn, "the executions of an unreachable host"):
        for row in remote_q.live_on_host(conn, host):
            state = ExecutionState(row["state"])
            if row["remote_agent_id"] is None or state is ExecutionState.UNREACHABLE:
                continue
            if can_transition(state, ExecutionState.UNREACHABLE):
                agents_q.transition(
                    conn,
                    row["id"],
                    ExecutionState.UNREACHABLE,
                    event_extra={"reason": reason[:500]},
                )
                moved.append(row["id"])
    return moved


def mark_reachable(conn: sqlite3.Connection, row: sqlite3.Row, remote_state: str) -> bool:
    """The host answers again and its record says `remote_state` (live): the execution is that
    again. Terminal states arrive as the host's own state events, never from here."""
    target = ExecutionState(remote_state)
    if target.terminal or target is ExecutionState.CREATED:
        return False
    with write(conn, "an execution whose host answers again"):
        now = agents_q.get_execution(conn, row["id"])
        if ExecutionState(now["state"]) is not ExecutionState.UNREACHABLE:
            return False
        agents_q.transition(
            conn, row["id"], target, event_extra={"reason": "its host answers again"}
        )
    return True


# -- the loop ------------------------------------------------------------------------------------


class HostMirror:
    """The mirror of one host: runs while the host has live executions here."""

    def __init__(self, daemon: MirrorDaemon, registry: HostRegistry, host: str) -> None:
        self.daemon = daemon
        self.registry = registry
        self.host = host
        self.executor = SshExecutor(daemon, registry, host)
        self.revision = 0  # the host's revision seen last

    def _log(self, level: str, event: str, **fields: Any) -> None:
        if self.daemon.log is not None:
            getattr(self.daemon.log, level)(event, host=self.host, **fields)

    async def run(self) -> None:
        misses = 0
        while True:
            rows = await self.daemon.db(remote_q.live_on_host, self.host)
            if not rows:
                return
            try:
                link = await self.registry.link(self.host)
            except errors.DomainError as exc:
                moved = await self.daemon.db(mark_unreachable, self.host, exc.message)
                if moved:
                    self._log(
                        "warning", "host.agents_unreachable", executions=moved, error=exc.message
                    )
                await asyncio.sleep(RETRY_SECONDS[min(misses, len(RETRY_SECONDS) - 1)])
                misses += 1
                continue
            misses = 0
            try:
                if not await self.pass_once(link, rows):
                    await self._wait(link)
            except errors.HostUnreachable as exc:
                self._log("info", "host.link_ended", error=exc.message)
            except Exception as exc:  # keep mirroring; the next pass may succeed
                self._log("error", "host.mirror_error", error=repr(exc))
                await asyncio.sleep(1.0)

    async def pass_once(self, link: Any, rows: list[sqlite3.Row]) -> bool:
        """One page of every execution, then the commands; True when a page was full."""
        busy = False
        for row in rows:
            if row["remote_agent_id"] is None:
                if row["id"] not in self.daemon.starting:  # admitted, never started there
                    self.daemon.starting.add(row["id"])
                    try:
                        await self.executor.spawn(row["agent_id"], row["id"])
                    finally:
                        self.daemon.starting.discard(row["id"])
                continue
            busy |= await self.sync(link, row)
        await self.forward_commands(link, rows)
        return busy

    async def sync(self, link: Any, row: sqlite3.Row) -> bool:
        page = await self.executor.read_events(
            link, row["remote_agent_id"], row["event_seq"], row["message_id"], PAGE
        )
        execution = page["execution"]
        ends = any(
            e["kind"] == "state" and ExecutionState(e["data"]["state"]).terminal
            for e in page["events"]
        )
        answer = None
        if ends and execution["state"] == ExecutionState.SUCCEEDED and execution["answer_sha256"]:
            answer = await self.executor.fetch_answer(link, row["remote_agent_id"], execution)
        if ends and row["workspace_json"]:
            await self.executor.collect_diff(link, json.loads(row["workspace_json"]))
        await self.daemon.db(write_page, self.daemon.home, row, page, answer)
        full = len(page["events"]) >= PAGE or len(page["messages"]) >= PAGE
        if not full and row["state"] == ExecutionState.UNREACHABLE:  # caught up: its record says
            await self.daemon.db(mark_reachable, row, execution["state"])
        return full

    async def forward_commands(self, link: Any, rows: list[sqlite3.Row]) -> None:
        """Pending cancel / steer of the local queue, into the host's queue; resolved here with
        the host's verdict."""
        for row in rows:
            if row["remote_agent_id"] is None:
                continue
            for command in await self.daemon.db(commands_q.pending, row["id"]):
                state, result = await self.executor.signal(link, row["remote_agent_id"], command)
                if state is not None:
                    await self.daemon.db(_resolve, command, state, result)

    async def _wait(self, link: Any) -> None:
        """Until the host's record moves (a long-poll there) or a local command is queued."""
        local = asyncio.ensure_future(
            self.daemon.watcher.wait_past(self.daemon.watcher.revision, CHANGES_WAIT_SECONDS)
        )
        remote = asyncio.ensure_future(
            link.call(
                "changes",
                {"after_revision": self.revision, "wait_seconds": CHANGES_WAIT_SECONDS, "limit": 1},
                timeout=CHANGES_WAIT_SECONDS + 30,
            )
        )
        try:
            await asyncio.wait({local, remote}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (local, remote):
                task.cancel()
        if remote.done() and not remote.cancelled():
            failure = remote.exception()
            if failure is not None:
                raise failure
            self.revision = remote.result()["revision"]


def _resolve(conn: sqlite3.Connection, command: sqlite3.Row, state: str, result: str) -> None:
    with write(conn, "a forwarded command's verdict"):
        if commands_q.get(conn, command["id"])["state"] == "pending":
            commands_q.resolve(conn, command, state=state, result=result)
