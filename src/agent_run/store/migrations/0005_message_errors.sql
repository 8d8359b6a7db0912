-- Failed tool calls: a tool result the engine marked as an error (Claude Code / Qwen Code
-- `is_error`, a Codex command's non-zero exit, a failed patch or MCP call) keeps that mark.

ALTER TABLE messages ADD COLUMN is_error INTEGER NOT NULL DEFAULT 0;
