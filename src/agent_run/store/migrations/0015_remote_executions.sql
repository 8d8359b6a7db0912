-- Executions placed on a host (`[hosts.NAME]`, docs/scaling.md): `executions.host` names it
-- (NULL: this machine). `remote_executions` is the mirror's bookkeeping: the agent the host's
-- daemon made for it (its `start` had request_id = the local execution id), the host's
-- per-agent event sequence number and message id copied so far (written in the same
-- transaction as what was copied: a dropped connection resumes there, nothing twice, nothing
-- missed), and for a batch run its workspace on the host.
ALTER TABLE executions ADD COLUMN host TEXT;
CREATE INDEX executions_host ON executions (host) WHERE host IS NOT NULL;
CREATE TABLE remote_executions (
    execution_id        TEXT PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
    host                TEXT NOT NULL,
    remote_agent_id     TEXT,
    remote_execution_id TEXT,
    event_seq           INTEGER NOT NULL DEFAULT 0,
    message_id          INTEGER NOT NULL DEFAULT 0,
    workspace_json      TEXT,
    created_at          REAL NOT NULL,
    updated_at          REAL NOT NULL
) STRICT;
