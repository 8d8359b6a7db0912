-- The model roster cache: each runtime's own model list as its engine last reported it (Codex's
-- app-server `model/list`, asked by the capacity collector). `start` checks a model against it
-- without starting an engine process.
CREATE TABLE model_rosters (
    runtime      TEXT PRIMARY KEY,
    models_json  TEXT NOT NULL,
    observed_at  REAL NOT NULL,
    source       TEXT NOT NULL
);
