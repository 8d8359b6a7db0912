"""`agent-run mcp`'s side of the `mcp_channel` notice transport: the session's subscription to
the daemon (the socket-only `notice_channel` long-poll) and the push of each notice into the
MCP client as Claude Code's `notifications/claude/channel {content, meta}`."""

import asyncio
import os
from typing import Any

from agent_run.domain.errors import DomainError
from agent_run.domain.notices import ChannelBatch, ChannelNotice
from agent_run.rpc.client import AsyncClient

CHANNEL_METHOD = "notifications/claude/channel"
CAPABILITY = {"claude/channel": {}}  # capabilities.experimental: Claude Code listens for it
POLL_SECONDS = 20.0
NOTIFY_TOOLS = ("start", "batch_start")


def new_session_id() -> str:
    return "ms_" + os.urandom(10).hex()


class ChannelPusher:
    """One per `agent-run mcp` process: its session id, and once an agent is started with
    `notify: {transport: mcp_channel}`, the loop that pushes that session's notices."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.session_id = new_session_id()
        self.outbound: Any = None
        self.task: asyncio.Task[None] | None = None
        self.ack: list[str] = []  # pushed, not yet acknowledged to the daemon

    def bind(self, tool: str, arguments: dict[str, Any], session: Any) -> dict[str, Any]:
        """Fill in this session on an `mcp_channel` target and start the subscription."""
        notify = arguments.get("notify")
        if tool not in NOTIFY_TOOLS or not isinstance(notify, dict):
            return arguments
        if notify.get("transport") != "mcp_channel":
            return arguments
        # The connection-scoped outbound: the SDK has no public send for a custom method.
        self.outbound = session._connection.outbound
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
        return arguments | {"notify": notify | {"session": self.session_id}}

    async def _run(self) -> None:
        while True:
            params = {"session": self.session_id, "ack": self.ack, "wait_seconds": POLL_SECONDS}
            try:
                batch = await self.client.call("notice_channel", params)
            except (DomainError, OSError):  # the daemon restarts: keep the acks, poll again
                await asyncio.sleep(1.0)
                continue
            assert isinstance(batch, ChannelBatch)
            self.ack = []
            for notice in batch.notices:
                await self.outbound.notify(CHANNEL_METHOD, channel_params(notice))
                self.ack.append(notice.id)

    async def close(self) -> None:
        """The session ends: what it pushed is acknowledged, what it is still owed ends
        `expired` at once."""
        if self.task is None:
            return
        self.task.cancel()
        try:
            await self.client.call(
                "notice_channel", {"session": self.session_id, "ack": self.ack, "closing": True}
            )
        except (DomainError, OSError):
            pass  # the daemon expires it when the session stops polling


def channel_params(notice: ChannelNotice) -> dict[str, Any]:
    """`{content, meta}`: the notice's line and its trusted fields as string attributes."""
    meta = {"notice_id": notice.id}
    for key in ("agent_id", "batch_id", "state", "failure_kind"):
        if notice.body.get(key):
            meta[key] = str(notice.body[key])
    return {"content": notice.summary, "meta": meta}
