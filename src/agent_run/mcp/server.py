"""`agent-run mcp`: an MCP stdio server that proxies the one tool table to the daemon.

Nothing is executed here: every call goes to the daemon over its socket (started detached
when none answers, unless AGENT_RUN_NO_AUTOSTART=1). Results are `structuredContent` plus a
short human text; domain errors are `isError` results carrying the stable code and field. A
read-only call cut by the daemon's death is sent again to the next daemon (`AsyncClient`);
any other cut call is answered "outcome unknown", with how to check.
"""

import asyncio
import json
import sys
from io import TextIOWrapper
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from pydantic import BaseModel, ValidationError

from agent_run import __version__
from agent_run.domain.errors import DaemonUnavailable, DomainError
from agent_run.domain.requests import WaitParams
from agent_run.domain.views import WaitResult
from agent_run.mcp.channel import CAPABILITY, ChannelPusher
from agent_run.mcp.lines import CheckedLines
from agent_run.rpc.autostart import NO_AUTOSTART_ENV
from agent_run.rpc.client import AsyncClient, CallCut
from agent_run.rpc.protocol import validation_error_data
from agent_run.system.home import Home
from agent_run.text import render as cli_format
from agent_run.tools.table import TOOLS, Tool

WAIT_PROGRESS_SECONDS = 2.0
INSTRUCTIONS = (
    "agent-run runs coding agents as durable background jobs. Call `start` (it returns an "
    "agent id at once), then `wait` with a timeout below your host's tool-call limit (it "
    "returns timed_out: true rather than hanging; call it again to keep waiting), then "
    "`answer` for the verified result. `list_agents` with after_revision + wait_seconds "
    "long-polls for changes. Failures carry a failure_kind and advice; match on the kind."
)


def mcp_tool(tool: Tool) -> types.Tool:
    schema = tool.schema()
    return types.Tool(
        name=tool.name,
        description=tool.doc,
        input_schema=schema["inputSchema"],
        output_schema=schema["outputSchema"],
        annotations=types.ToolAnnotations(
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            idempotent_hint=tool.idempotent,
            open_world_hint=False,
        ),
    )


def ok_result(result: BaseModel) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=cli_format.render(result))],
        structured_content=result.model_dump(mode="json"),
    )


def error_result(data: dict[str, Any]) -> types.CallToolResult:
    """A human line, then the error as JSON. No structuredContent: clients (the Inspector among
    them) validate it against the tool's output schema even on errors."""
    field = f" (field `{data['field']}`)" if data.get("field") else ""
    text = f"{data['code']}{field}: {data['message']}"
    keys = ("code", "message", "field", "details")
    error = {"error": {k: data[k] for k in keys if data.get(k) is not None}}
    return types.CallToolResult(
        content=[types.TextContent(text=text), types.TextContent(text=json.dumps(error))],
        is_error=True,
    )


def error_data(result: types.CallToolResult) -> dict[str, Any]:
    """The `{code, message, field?}` of an isError result (for clients of this server)."""
    return json.loads(result.content[-1].text)["error"]


async def _wait_with_progress(
    client: AsyncClient, ctx: ServerRequestContext[Any, Any], params: WaitParams
) -> WaitResult:
    """Wait in slices (the client's `WaitSlices`), a progress notification after each that
    finds the agent running."""
    token = (ctx.meta or {}).get("progress_token")

    async def progress(result: WaitResult, elapsed: float) -> None:
        if token is None:
            return
        agent = result.agent
        last = (agent.last_message or "").splitlines()
        message = f"{agent.state}; {agent.event_count} events" + (
            f"; last: {last[0][:120]}" if last else ""
        )
        await ctx.session.send_progress_notification(
            token,
            round(elapsed, 3),
            total=params.timeout_seconds,
            message=message,
            related_request_id=ctx.request_id,
        )

    return await client.wait(
        params.agent_id, params.timeout_seconds, WAIT_PROGRESS_SECONDS, progress
    )


def build_server(home: Home, pusher: ChannelPusher | None = None) -> Server[Any]:
    client = AsyncClient(home)
    pusher = pusher or ChannelPusher(client)
    tools = [mcp_tool(tool) for tool in TOOLS.values()]

    async def list_tools(
        _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:
            return error_result(
                {
                    "code": "UnknownTool",
                    "field": "name",
                    "message": f"no tool {params.name!r}; tools: {', '.join(TOOLS)}",
                }
            )
        arguments = pusher.bind(tool.name, dict(params.arguments or {}), ctx.session)
        try:
            if tool.cli.waits:  # a long wait: in slices, a progress notification between them
                try:
                    wait_params = WaitParams.model_validate(arguments)
                except ValidationError as exc:
                    return error_result(validation_error_data(exc))
                result: BaseModel = await _wait_with_progress(client, ctx, wait_params)
            else:
                result = await client.call(tool.name, arguments)
        except CallCut as exc:  # the daemon read it, then died: say so, and how to check
            return error_result(exc.to_data())
        except DaemonUnavailable as exc:  # nothing reached a daemon
            no_start = f"; {NO_AUTOSTART_ENV}=1 is set" if _autostart_off() else ""
            return error_result(
                {
                    "code": exc.code,
                    "message": f"{exc.message}{no_start}. Nothing was "
                    "executed: agent-run runs tools only in its daemon.",
                }
            )
        except DomainError as exc:  # every error the client maps, protocol ones included
            return error_result(exc.to_data())
        return ok_result(result)

    return Server(
        "agent-run",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _autostart_off() -> bool:
    import os

    return os.environ.get(NO_AUTOSTART_ENV) == "1"


async def serve(home: Home) -> None:
    pusher = ChannelPusher(AsyncClient(home))
    server = build_server(home, pusher)
    options = server.create_initialization_options(experimental_capabilities=CAPABILITY)
    stdin = TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    lines = CheckedLines(anyio.wrap_file(stdin))
    try:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.attach(write_stream)
            await server.run(read_stream, write_stream, options)
    finally:
        await pusher.close()


def run(home: Home) -> None:
    asyncio.run(serve(home))
