"""Text forms of tool results, shared by the front-ends: `--format text` in the CLI, MCP's text content."""
