-- Capacity samples: one reading of one quota window of one (runtime, account, lane), from a
-- source (native engine streams, the Codex app-server, an external command). `account` null
-- means the runtime's own auth. The newest `[capacity] sample_retention` rows are kept.
CREATE TABLE capacity_samples (
    id                INTEGER PRIMARY KEY,
    runtime           TEXT NOT NULL,
    account           TEXT,
    lane              TEXT NOT NULL,
    window            TEXT NOT NULL,
    remaining_percent REAL CHECK (remaining_percent IS NULL OR (remaining_percent >= 0 AND remaining_percent <= 100)),
    reset_at          REAL,
    observed_at       REAL NOT NULL,
    valid_until       REAL NOT NULL,
    source            TEXT NOT NULL CHECK (source IN ('native', 'codex_appserver', 'command')),
    execution_id      TEXT
);

CREATE INDEX capacity_samples_route ON capacity_samples (runtime, account, lane, window, observed_at);
CREATE INDEX capacity_samples_observed ON capacity_samples (observed_at);
