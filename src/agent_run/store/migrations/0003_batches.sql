-- Batches: a workflow instance over one git project, its runs (one per worktree or reviewer)
-- and every attempt of each run (a rerun, resume or follow-up keeps the earlier ones).

CREATE TABLE batches (
    id               TEXT PRIMARY KEY,
    request_id       TEXT UNIQUE,
    request_hash     TEXT NOT NULL,
    workflow         TEXT NOT NULL CHECK (workflow IN ('repeated', 'generated', 'ranked', 'validated')),
    config_json      TEXT NOT NULL,
    project_root     TEXT NOT NULL,
    project_subdir   TEXT NOT NULL,
    base_ref         TEXT NOT NULL,
    base_sha         TEXT NOT NULL,
    worktree_root    TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued', 'running', 'blocked', 'completed', 'failed', 'cancelled')),
    state_reason     TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    ended_at         REAL
) STRICT;

CREATE TABLE batch_runs (
    id            TEXT PRIMARY KEY,
    batch_id      TEXT NOT NULL REFERENCES batches (id),
    stage         TEXT NOT NULL CHECK (stage IN ('generator', 'worker', 'candidate', 'reviewer', 'validator')),
    idx           INTEGER NOT NULL,
    parent_run_id TEXT,
    title         TEXT NOT NULL,
    prompt        TEXT NOT NULL,
    profile       TEXT NOT NULL CHECK (profile IN ('read_only', 'write')),
    worktree      TEXT,
    branch        TEXT,
    workdir       TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    failure       TEXT,
    agent_id      TEXT,
    attempt       INTEGER NOT NULL DEFAULT 0,
    locked        INTEGER NOT NULL DEFAULT 0,
    score         REAL,
    rank          INTEGER,
    verify_passed INTEGER,
    verify_output TEXT,
    result_json   TEXT,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    UNIQUE (batch_id, stage, idx)
) STRICT;

CREATE INDEX batch_runs_batch ON batch_runs (batch_id, stage, idx);

CREATE TABLE batch_attempts (
    run_id     TEXT NOT NULL REFERENCES batch_runs (id),
    attempt    INTEGER NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('start', 'rerun', 'resume', 'followup')),
    agent_id   TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, attempt)
) STRICT;
