"""An asyncio client of the daemon's socket: one short connection per call.

A call's connection closes with it, so a caller that gives up (an MCP client cancelling a
`wait`) also ends the daemon's side of a read-only request.
"""

import asyncio
import json
from typing import Any

from agent_run.domain.errors import DaemonUnavailable, error_from_data
from agent_run.home import Home
from agent_run.rpc import protocol as p
from agent_run.rpc.client import RpcError


async def call(home: Home, method: str, params: dict[str, Any] | None = None) -> Any:
    line = p.encode_request(1, method, params or {})  # LineTooLong before anything is sent
    try:
        reader, writer = await asyncio.open_unix_connection(str(home.socket_path),
                                                            limit=64 * 1024 * 1024)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise DaemonUnavailable(f"no daemon answers at {home.socket_path}: {exc.strerror}") from None
    try:
        writer.write(line)
        await writer.drain()
        reply_line = await reader.readline()
    finally:
        writer.close()
    if not reply_line:
        raise DaemonUnavailable("the daemon closed the connection before answering")
    reply = json.loads(reply_line)
    if "error" in reply:
        err = reply["error"]
        if isinstance(err.get("data"), dict) and "code" in err["data"]:
            raise error_from_data(err["data"])
        raise RpcError(err["code"], err["message"], err.get("data"))
    return reply["result"]
