-- Workflow and stage names are checked in Python (batches/workflows.py), not pinned by CHECK,
-- so a fifth workflow needs no table rebuild. SQLite cannot drop a CHECK: the three batch
-- tables are rebuilt, data preserved. Renaming a table rewrites the foreign keys that point at
-- it, so the old tables keep referencing each other and are dropped children first; this works
-- with foreign_keys on, inside the migration's transaction.

ALTER TABLE batch_attempts RENAME TO old_batch_attempts;
ALTER TABLE batch_runs RENAME TO old_batch_runs;
ALTER TABLE batches RENAME TO old_batches;

CREATE TABLE batches (
    id               TEXT PRIMARY KEY,
    request_id       TEXT UNIQUE,
    request_hash     TEXT NOT NULL,
    workflow         TEXT NOT NULL,
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
    stage         TEXT NOT NULL,
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

CREATE TABLE batch_attempts (
    run_id     TEXT NOT NULL REFERENCES batch_runs (id),
    attempt    INTEGER NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('start', 'rerun', 'resume', 'followup')),
    agent_id   TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, attempt)
) STRICT;

INSERT INTO batches (id, request_id, request_hash, workflow, config_json, project_root, project_subdir,
                     base_ref, base_sha, worktree_root, state, state_reason, cancel_requested, created_at,
                     updated_at, ended_at)
    SELECT id, request_id, request_hash, workflow, config_json, project_root, project_subdir, base_ref,
           base_sha, worktree_root, state, state_reason, cancel_requested, created_at, updated_at, ended_at
    FROM old_batches;

INSERT INTO batch_runs (id, batch_id, stage, idx, parent_run_id, title, prompt, profile, worktree, branch,
                        workdir, state, failure, agent_id, attempt, locked, score, rank, verify_passed,
                        verify_output, result_json, created_at, updated_at)
    SELECT id, batch_id, stage, idx, parent_run_id, title, prompt, profile, worktree, branch, workdir, state,
           failure, agent_id, attempt, locked, score, rank, verify_passed, verify_output, result_json,
           created_at, updated_at
    FROM old_batch_runs;

INSERT INTO batch_attempts (run_id, attempt, kind, agent_id, created_at)
    SELECT run_id, attempt, kind, agent_id, created_at FROM old_batch_attempts;

DROP TABLE old_batch_attempts;
DROP TABLE old_batch_runs;
DROP TABLE old_batches;

CREATE INDEX batch_runs_batch ON batch_runs (batch_id, stage, idx);
