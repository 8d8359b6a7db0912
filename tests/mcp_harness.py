"""An MCP client session on `agent-run mcp`, spawned as a real stdio child, for tests."""

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agent_run.system.home import Home


@asynccontextmanager
async def mcp_session(
    home: Home, env: dict[str, str] | None = None, **session: Any
) -> AsyncIterator[ClientSession]:
    """`session`: more ClientSession arguments (e.g. `notification_bindings`)."""
    full_env = {k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"}
    full_env.update(env or {})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent_run", "--home", str(home.root), "mcp"],
        env=full_env,
    )
    with open(home.root / "mcp-test.err", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **session) as client:
                await client.initialize()
                yield client
