-- Agents, their executions, the append-only event log, the transcript and the command queue.

CREATE TABLE agents (
    id           TEXT PRIMARY KEY,
    request_id   TEXT UNIQUE,
    request_hash TEXT NOT NULL,
    runtime      TEXT NOT NULL,
    engine       TEXT NOT NULL,
    model        TEXT NOT NULL,
    task         TEXT NOT NULL,
    workdir      TEXT NOT NULL,
    profile      TEXT NOT NULL CHECK (profile IN ('read_only', 'write')),
    created_at   REAL NOT NULL
) STRICT;

CREATE TABLE executions (
    id                     TEXT PRIMARY KEY,
    agent_id               TEXT NOT NULL REFERENCES agents (id),
    number                 INTEGER NOT NULL,
    kind                   TEXT NOT NULL CHECK (kind IN ('start', 'resume', 'followup')),
    prompt                 TEXT NOT NULL,
    state                  TEXT NOT NULL,
    failure_kind           TEXT,
    failure_message        TEXT,
    plan_json              TEXT NOT NULL,
    supervisor_pid         INTEGER,
    supervisor_start_ticks INTEGER,
    boot_id                TEXT,
    engine_pid             INTEGER,
    engine_start_ticks     INTEGER,
    engine_session_id      TEXT,
    exit_code              INTEGER,
    answer_path            TEXT,
    answer_sha256          TEXT,
    answer_bytes           INTEGER,
    usage_json             TEXT,
    cost_usd               REAL,
    created_at             REAL NOT NULL,
    started_at             REAL,
    ended_at               REAL,
    updated_at             REAL NOT NULL,
    UNIQUE (agent_id, number)
) STRICT;

CREATE INDEX executions_live ON executions (state) WHERE state NOT IN ('succeeded', 'failed', 'cancelled', 'lost');

CREATE TABLE events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id     TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    agent_seq    INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    data         TEXT NOT NULL,
    ts           REAL NOT NULL,
    UNIQUE (agent_id, agent_seq)
) STRICT;

CREATE TABLE messages (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id     TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    role         TEXT NOT NULL,
    name         TEXT,
    content      TEXT NOT NULL,
    ts           REAL NOT NULL
) STRICT;

CREATE INDEX messages_agent ON messages (agent_id, id);

CREATE TABLE commands (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id     TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('cancel', 'steer')),
    payload      TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'refused', 'done')),
    result       TEXT,
    created_at   REAL NOT NULL,
    handled_at   REAL
) STRICT;

CREATE INDEX commands_pending ON commands (execution_id) WHERE state = 'pending';
