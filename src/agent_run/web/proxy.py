"""The web front-end's client of the daemon: one short socket call per tool call, autostart once."""

import asyncio
from typing import Any

from agent_run.domain.errors import DaemonUnavailable
from agent_run.home import Home
from agent_run.rpc import async_client
from agent_run.rpc.client import connect


class DaemonProxy:
    def __init__(self, home: Home) -> None:
        self.home = home
        self._start_lock = asyncio.Lock()

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        try:
            return await async_client.call(self.home, method, params or {})
        except DaemonUnavailable:
            await self._ensure_daemon()
            return await async_client.call(self.home, method, params or {})

    async def _ensure_daemon(self) -> None:
        """Start the daemon as the CLI would (unless AGENT_RUN_NO_AUTOSTART=1); raise if none answers."""
        async with self._start_lock:
            client = await asyncio.to_thread(connect, self.home)
            client.close()
