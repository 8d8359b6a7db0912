-- Picking the winner of a batch (issue 37).
--
-- A batch's `title` (batch_start's, by default its prompt's first line, trimmed; a batch made
-- before this gets that default) and `archived_at` (batch_archive: out of list_batches' default
-- view; NULL: shown).
ALTER TABLE batches ADD COLUMN title TEXT NOT NULL DEFAULT '';
ALTER TABLE batches ADD COLUMN archived_at REAL;
UPDATE batches SET title = coalesce(substr(trim(substr(
    ltrim(json_extract(config_json, '$.prompt'), ' ' || char(9) || char(10) || char(13)), 1,
    instr(ltrim(json_extract(config_json, '$.prompt'), ' ' || char(9) || char(10) || char(13))
          || char(10), char(10)) - 1), ' ' || char(9) || char(13)), 1, 200), '');

-- list_batches reads a page as an index range, newest first, from a keyset cursor
-- (created_at, id): the shown (unarchived) batches, all of them, or those in a state.
CREATE INDEX batches_shown ON batches (created_at, id) WHERE archived_at IS NULL;
CREATE INDEX batches_created ON batches (created_at, id);
CREATE INDEX batches_state ON batches (state, created_at, id);

-- list_batches' `q`: full-text search over each batch's title, prompt and project folder. The
-- index only (contentless): the prompt stays stored once, in config_json. Its rows are keyed by
-- `search_rowid`, a column of the batch's own (a rowid that VACUUM could renumber is not);
-- written with the batch, which is never deleted.
ALTER TABLE batches ADD COLUMN search_rowid INTEGER;
UPDATE batches SET search_rowid = rowid;
CREATE UNIQUE INDEX batches_search_rowid ON batches (search_rowid);
CREATE VIRTUAL TABLE batch_search USING fts5 (
    title, prompt, project, content = '', tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO batch_search (rowid, title, prompt, project)
    SELECT search_rowid, title, coalesce(json_extract(config_json, '$.prompt'), ''), project_root
    FROM batches;

-- Each run's result, measured once when it settles (so a batch view reads it, never git):
-- `answer_excerpt` (the start of its agent's sealed answer, plain text), `diff_json` (its
-- change against the pinned base: files, insertions, deletions, commits, uncommitted files,
-- the branch tip), both of the attempt `measured_attempt`; NULL until measured.
ALTER TABLE batch_runs ADD COLUMN answer_excerpt TEXT;
ALTER TABLE batch_runs ADD COLUMN diff_json TEXT;
ALTER TABLE batch_runs ADD COLUMN measured_attempt INTEGER;
-- How a ranked candidate's rank came about (its score's reviews, verify, the tie-break that
-- decided it), written with its score and rank.
ALTER TABLE batch_runs ADD COLUMN rank_reason TEXT;
-- Settled runs whose result is not measured yet: the scheduler's sweep reads only these.
CREATE INDEX batch_runs_unmeasured ON batch_runs (batch_id) WHERE measured_attempt IS NOT attempt;
