"""The web front-end's client of the daemon: one short socket call per tool call, starting the
daemon whenever none answers (one start at a time; `AGENT_RUN_NO_AUTOSTART=1` turns it off)."""

from typing import Any

from agent_run.rpc.client import AsyncClient


class DaemonProxy(AsyncClient):
    """The async client's JSON face: the web UI forwards and templates the daemon's JSON."""

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:  # type: ignore[override]
        return await self.call_raw(method, params)
