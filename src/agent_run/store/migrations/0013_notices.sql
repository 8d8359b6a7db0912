-- Completion notices (issue 16 part 2): where an agent's (or a batch's) end is announced, the
-- durable outbox of notices, and the one dispatcher's lease.
CREATE TABLE notify_targets (
    id          INTEGER PRIMARY KEY,
    agent_id    TEXT UNIQUE,
    batch_id    TEXT UNIQUE,
    target_json TEXT NOT NULL,
    created_at  REAL NOT NULL,
    CHECK ((agent_id IS NULL) <> (batch_id IS NULL))
) STRICT;

CREATE TABLE notices (
    id              TEXT PRIMARY KEY,
    target_id       INTEGER NOT NULL REFERENCES notify_targets (id),
    subject         TEXT NOT NULL UNIQUE,
    transport       TEXT NOT NULL,
    body_json       TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN
                        ('pending', 'sending', 'delivered', 'retry_wait', 'failed', 'expired')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    ambiguous_sends INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    last_error      TEXT,
    evidence_json   TEXT,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
) STRICT;

CREATE INDEX notices_due ON notices (next_attempt_at) WHERE state IN ('pending', 'retry_wait');

CREATE TABLE notice_lease (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    holder      TEXT NOT NULL,
    holder_pid  INTEGER NOT NULL,
    expires_at  REAL NOT NULL
) STRICT;
