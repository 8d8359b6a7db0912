"""Worker tools: the small per-agent MCP server the supervisor injects into an engine.

Bound to one execution by a capability token; each call becomes a `tool_reports` row.
"""
