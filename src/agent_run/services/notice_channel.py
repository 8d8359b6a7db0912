"""The `mcp_channel` transport's daemon side: each `agent-run mcp` process holds a subscription
(the socket-only `notice_channel` long-poll) that hands it its session's notices and takes its
acknowledgements; a session that stops polling is gone, and what it was owed ends `expired`."""

import asyncio
import json
import sqlite3
import time

from agent_run.domain.notices import (
    MAX_ATTEMPTS,
    ChannelBatch,
    ChannelNotice,
    ChannelParams,
    Classifier,
    summary_line,
)
from agent_run.services.context import ServiceContext
from agent_run.store import notices as notices_q
from agent_run.store.db import write

# A session not polling for this long is gone (its process polls again within a second).
GONE_AFTER_SECONDS = 10.0
# After a daemon (re)start, sessions get this long to poll the new daemon before expiring.
BOOT_GRACE_SECONDS = 15.0
GONE = "the MCP session that started the agent is gone"


class Channels:
    """The live subscriptions of this daemon (in memory: a restarted daemon learns them again)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.polling: dict[str, int] = {}
        self.last_seen: dict[str, float] = {}
        self.closed: set[str] = set()  # sessions that said they end: never live again
        self.changed = asyncio.Event()

    def live(self, session: str) -> bool:
        if session in self.closed:
            return False
        now = time.monotonic()
        if now - self.started < BOOT_GRACE_SECONDS:
            return True
        seen = self.last_seen.get(session)
        return self.polling.get(session, 0) > 0 or (
            seen is not None and now - seen < GONE_AFTER_SECONDS
        )

    def wake(self) -> None:
        self.changed.set()


def channels_of(ctx: ServiceContext) -> Channels:
    if ctx.notice_channels is None:
        ctx.notice_channels = Channels()
    channels: Channels = ctx.notice_channels
    return channels


def _ack(conn: sqlite3.Connection, ids: list[str]) -> None:
    if ids:
        evidence = json.dumps({"classifier": Classifier.SUCCESS.value, "duration_seconds": 0.0})
        with write(conn, "a notice's delivery"):
            notices_q.acknowledge(conn, ids, evidence)


def _claim(conn: sqlite3.Connection, session: str) -> list[dict[str, object]]:
    with write(conn, "a notice's delivery"):
        return notices_q.claim_for_session(conn, session, time.time())


def _close(conn: sqlite3.Connection, session: str) -> None:
    with write(conn, "an MCP session's notices"):
        notices_q.expire_session(conn, session, GONE)


async def notice_channel(ctx: ServiceContext, p: ChannelParams) -> ChannelBatch:
    """Acknowledge what was pushed, then return the session's owed notices (waiting up to
    `wait_seconds` for some)."""
    channels = channels_of(ctx)
    await ctx.db(_ack, list(p.ack))
    if p.closing:
        channels.closed.add(p.session)
        channels.wake()  # a poll of that session still parked here returns empty
        await ctx.db(_close, p.session)
        return ChannelBatch(notices=[])
    channels.polling[p.session] = channels.polling.get(p.session, 0) + 1
    deadline = time.monotonic() + p.wait_seconds
    try:
        while True:
            channels.changed.clear()
            if p.session in channels.closed:
                rows = []
                break
            rows = await ctx.db(_claim, p.session)
            if rows or time.monotonic() >= deadline:
                break
            try:
                await asyncio.wait_for(
                    channels.changed.wait(), min(1.0, deadline - time.monotonic())
                )
            except TimeoutError:
                pass
    finally:
        channels.polling[p.session] -= 1
        channels.last_seen[p.session] = time.monotonic()
    return ChannelBatch(notices=[_channel_notice(row) for row in rows])


def _channel_notice(row: dict[str, object]) -> ChannelNotice:
    body = json.loads(str(row["body_json"]))
    return ChannelNotice(id=str(row["id"]), body=body, summary=summary_line(body))


def sweep_channels(conn: sqlite3.Connection, channels: Channels, unacked_seconds: float) -> None:
    """The dispatcher's pass over channel notices: pushes unacknowledged for `unacked_seconds`
    (`daemon.notice_unacked_seconds`) retried, and the notices of sessions that are gone
    expired."""
    now = time.time()
    with write(conn, "MCP channel notices"):
        notices_q.requeue_unacked(conn, "mcp_channel", now - unacked_seconds, now, MAX_ATTEMPTS)
        for session in notices_q.channel_sessions_owed(conn):
            if not channels.live(session):
                notices_q.expire_session(conn, session, GONE)
