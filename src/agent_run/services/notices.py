"""The notice dispatcher (one per home, holding the outbox lease): it turns ended executions
and batches with a `notify` target into notices and delivers them at least once, with backoff;
and the `delivery_status` tool."""

import asyncio
import json
import sqlite3
import time
from typing import Any

from agent_run.domain import errors
from agent_run.domain.ids import new_id
from agent_run.domain.notices import (
    MAX_ATTEMPTS,
    NOTIFY_TARGET,
    Classifier,
    CodexQueueTarget,
    CommandTarget,
    NoticeState,
    backoff_seconds,
    build_notice,
)
from agent_run.domain.requests import DeliveryStatusParams
from agent_run.domain.views import DeliveryAttempt, DeliveryStatus, NoticeView
from agent_run.services.context import ServiceContext
from agent_run.services.notice_channel import channels_of, sweep_channels
from agent_run.services.notice_send import (
    Evidence,
    failure_evidence,
    send_codex_queue,
    send_command,
)
from agent_run.store import agents as agents_q
from agent_run.store import batches as batches_q
from agent_run.store import notices as notices_q
from agent_run.store.db import write
from agent_run.system.processes import Liveness, ProcessIdentity, current

TICK_SECONDS = 0.5
LEASE_SECONDS = 30.0
_EXECUTION_FACTS = ("agent_id", "execution", "state", "failure_kind", "runtime", "model")


def _facts(row: dict[str, Any]) -> dict[str, object]:
    """A notice's content: the store's own ids, states and hashes, never a task or an answer."""
    if row.get("batch_id"):
        keys = ("batch_id", "state", "workflow", "settle")  # settle: its nth (blocked or ended)
        return {key: row[key] for key in keys}
    facts: dict[str, object] = {key: row[key] for key in _EXECUTION_FACTS if row[key] is not None}
    if row["answer_sha256"]:
        facts["answer_sha256"] = row["answer_sha256"]
    return facts


def enqueue_ended(conn: sqlite3.Connection) -> int:
    """Make the notice of every ended execution or batch that has a target and none yet."""
    made = 0
    with write(conn, "completion notices"):
        for row in notices_q.ended_without_notice(conn):
            notice_id = new_id("nt")
            made += notices_q.insert_notice(
                conn,
                notice_id=notice_id,
                target_id=row["target_id"],
                subject=row["subject"],
                transport=json.loads(row["target_json"])["transport"],
                body_json=build_notice(notice_id, _facts(row)),
            )
    return made


def _holder_dead(holder: str) -> bool:
    """Whether the lease's holder (`boot:pid:ticks`) is proved dead (unknown is never dead)."""
    boot, pid, ticks = holder.rsplit(":", 2)
    identity = ProcessIdentity(int(pid), int(ticks), boot)
    return current().liveness(identity) is Liveness.DEAD


class NoticeDispatcher:
    """The daemon's one sender. Each tick: hold the lease, enqueue, claim what is due, send."""

    def __init__(self, ctx: ServiceContext, log: Any) -> None:
        me = ProcessIdentity.current()
        self.ctx, self.log = ctx, log
        self.holder = f"{me.boot_id}:{me.pid}:{me.start_ticks}"
        self.pid = me.pid
        self.sending: set[asyncio.Task[None]] = set()
        self.in_flight: set[str] = set()  # the notices this dispatcher's tasks are sending

    def _lease(self, conn: sqlite3.Connection, in_flight: list[str]) -> bool:
        """Take or renew the lease; held, requeue (as ambiguous) the notices left `sending`: all
        of them after a takeover, else those none of our tasks sends (`in_flight`, taken on the
        event loop: an attempt whose outcome could not be written never stays `sending`)."""
        now = time.time()
        with write(conn, "the notice lease"):
            row = notices_q.lease_holder(conn)
            dead = row is not None and row["holder"] != self.holder and _holder_dead(row["holder"])
            held, previous = notices_q.take_lease(
                conn, self.holder, self.pid, now, LEASE_SECONDS, holder_dead=dead
            )
            if held and (previous or row is None or row["holder"] != self.holder):
                evidence = Evidence(Classifier.AMBIGUOUS, 0.0, error="dispatcher stopped")
                requeued = notices_q.requeue_ambiguous(conn, now, evidence.to_json())
                if requeued and self.log is not None:
                    self.log.warning("notice.ambiguous_requeued", count=requeued)
            elif held:
                evidence = Evidence(Classifier.AMBIGUOUS, 0.0, error="outcome not recorded")
                stale = notices_q.requeue_stale_sending(conn, in_flight, now, evidence.to_json())
                if stale and self.log is not None:
                    self.log.warning("notice.stale_requeued", count=stale)
        return held

    async def tick(self) -> None:
        if not await self.ctx.db(self._lease, sorted(self.in_flight)):
            return
        channels = channels_of(self.ctx)
        if await self.ctx.db(enqueue_ended):
            channels.wake()  # an MCP session's long-poll takes its notices at once
        await self.ctx.db(sweep_channels, channels, self.ctx.config.daemon.notice_unacked_seconds)
        for row in await self.ctx.db(notices_q.claim_due, time.time()):
            task = asyncio.get_running_loop().create_task(self._deliver(row))
            self.sending.add(task)
            self.in_flight.add(row["id"])
            task.add_done_callback(self.sending.discard)
            task.add_done_callback(
                lambda _t, notice_id=row["id"]: self.in_flight.discard(notice_id)
            )

    async def run_forever(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as exc:  # keep dispatching; the next tick may succeed
                if self.log is not None:
                    self.log.error("notice.dispatch_error", error=repr(exc))
            self.ctx.notice_passes += 1
            await asyncio.sleep(TICK_SECONDS)

    async def _deliver(self, row: dict[str, Any]) -> None:
        """One attempt. Whatever it raises is recorded as that attempt (`error`), so a notice
        never stays `sending` with no evidence."""
        started = time.monotonic()
        raw = json.loads(row["target_json"])
        max_attempts = raw.get("max_attempts", MAX_ATTEMPTS)
        try:
            target = NOTIFY_TARGET.validate_python(raw)
            max_attempts = target.max_attempts
            if isinstance(target, CommandTarget):
                evidence = await send_command(target, row["body_json"])
            elif isinstance(target, CodexQueueTarget):
                evidence = await send_codex_queue(target, row["body_json"])
            else:  # mcp_channel notices are taken by their session's poll, never claimed here
                evidence = Evidence(Classifier.SPAWN, 0.0, error="not a dispatched transport")
        except Exception as exc:
            hidden = list(map(str, raw.get("argv", [])))
            hidden += [str(raw[key]) for key in ("thread_id", "codex_home") if raw.get(key)]
            evidence = failure_evidence(exc, started, hidden)
            if self.log is not None:
                self.log.error("notice.send_error", notice_id=row["id"], error=evidence.error)
        try:
            await self.ctx.db(self._record, row, max_attempts, evidence)
        except Exception as exc:  # left `sending`: the next tick requeues it (_lease)
            if self.log is not None:
                self.log.error("notice.record_failed", notice_id=row["id"], error=repr(exc))

    def _record(
        self, conn: sqlite3.Connection, row: dict[str, Any], max_attempts: int, ev: Evidence
    ) -> None:
        now = time.time()
        if ev.classifier in (Classifier.SUCCESS, Classifier.RECEIVED_TIMEOUT):
            state, when = NoticeState.DELIVERED, now
        elif row["attempts"] >= max_attempts:
            state, when = NoticeState.FAILED, now
        else:
            state, when = NoticeState.RETRY_WAIT, now + backoff_seconds(row["attempts"])
        with write(conn, "a notice's delivery"):
            notices_q.finish_attempt(
                conn,
                row["id"],
                state=state.value,
                next_attempt_at=when,
                last_error=ev.summary,
                evidence_json=ev.to_json(),
            )
        if self.log is not None:
            self.log.info(
                "notice.attempt", notice_id=row["id"], state=state.value, classifier=ev.classifier
            )


# -- the tool ------------------------------------------------------------------------------


def _notice_view(row: dict[str, Any]) -> NoticeView:
    evidence = json.loads(row["evidence_json"]) if row["evidence_json"] else None
    return NoticeView(
        id=row["id"],
        transport=row["transport"],
        state=row["state"],
        attempts=row["attempts"],
        ambiguous_sends=row["ambiguous_sends"],
        next_attempt_at=row["next_attempt_at"] if row["state"] == "retry_wait" else None,
        last_error=row["last_error"],
        last_attempt=DeliveryAttempt.model_validate(evidence) if evidence else None,
        body=json.loads(row["body_json"]),
    )


def _subject(conn: sqlite3.Connection, p: DeliveryStatusParams) -> dict[str, Any]:
    """Whose notices (agent or batch, with its target) and which: exactly one id given."""
    given = [name for name in ("agent_id", "batch_id", "notice_id") if getattr(p, name)]
    if len(given) != 1:
        raise errors.InvalidRequest(
            "give exactly one of agent_id, batch_id, notice_id",
            field=given[1] if given else "agent_id",
        )
    if p.agent_id is not None:
        if agents_q.get_agent(conn, p.agent_id) is None:
            raise errors.AgentNotFound(f"no agent {p.agent_id}", field="agent_id")
        return {"agent_id": p.agent_id, "target": notices_q.target_of(conn, agent_id=p.agent_id)}
    if p.batch_id is not None:
        if batches_q.get_batch(conn, p.batch_id) is None:
            raise errors.BatchNotFound(f"no batch {p.batch_id}", field="batch_id")
        return {"batch_id": p.batch_id, "target": notices_q.target_of(conn, batch_id=p.batch_id)}
    row = notices_q.notice_with_target(conn, str(p.notice_id))
    if row is None:
        raise errors.InvalidRequest(f"no notice {p.notice_id}", field="notice_id")
    return {"agent_id": row["target_agent"], "batch_id": row["target_batch"], "notice": row}


def _status(conn: sqlite3.Connection, p: DeliveryStatusParams) -> DeliveryStatus:
    subject = _subject(conn, p)
    target, one_notice = subject.get("target"), subject.get("notice")
    if one_notice is not None:
        target = one_notice
        rows = [dict(one_notice)]
    else:
        rows = notices_q.notices_of(conn, target["id"]) if target else []
    notices = [_notice_view(row) for row in rows]
    latest = notices[-1] if notices else None
    return DeliveryStatus(
        agent_id=subject.get("agent_id"),
        batch_id=subject.get("batch_id"),
        transport=json.loads(target["target_json"])["transport"] if target else None,
        state=latest.state if latest else None,
        attempts=latest.attempts if latest else 0,
        last_error=latest.last_error if latest else None,
        last_attempt=latest.last_attempt if latest else None,
        notices=notices,
    )


async def delivery_status(ctx: ServiceContext, p: DeliveryStatusParams) -> DeliveryStatus:
    return await ctx.db(_status, p)
