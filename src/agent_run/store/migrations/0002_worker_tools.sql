-- Worker tools: reports from the per-agent MCP server, the verdict they carry, the capability
-- token's hash, and provider signals (rate-limit and quota evidence) for capacity decisions.

ALTER TABLE executions ADD COLUMN verdict TEXT;

ALTER TABLE executions ADD COLUMN worker_token_sha256 TEXT;

CREATE TABLE tool_reports (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id     TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    tool         TEXT NOT NULL,
    payload      TEXT NOT NULL,
    ts           REAL NOT NULL
) STRICT;

CREATE INDEX tool_reports_execution ON tool_reports (execution_id, tool, id);

CREATE TABLE provider_signals (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id     TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    runtime      TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('retry', 'rate_limited', 'quota_exhausted', 'usage')),
    status       INTEGER,
    retry_after  REAL,
    detail       TEXT NOT NULL,
    ts           REAL NOT NULL
) STRICT;

CREATE INDEX provider_signals_runtime ON provider_signals (runtime, ts);
