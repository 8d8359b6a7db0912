-- Answer integrity: when a sealed answer was last re-hashed (on `answer`, by the batch judge or
-- the daemon's scrub) and when a re-hash last found it not matching its proof (NULL: it matched).

ALTER TABLE executions ADD COLUMN answer_checked_at REAL;

ALTER TABLE executions ADD COLUMN integrity_failed_at REAL;

CREATE INDEX executions_sealed ON executions (answer_checked_at) WHERE answer_sha256 IS NOT NULL;
