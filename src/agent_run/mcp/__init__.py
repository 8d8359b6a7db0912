"""`agent-run mcp`: the tool table as an MCP stdio server (a proxy to the daemon) and its notice channel."""
