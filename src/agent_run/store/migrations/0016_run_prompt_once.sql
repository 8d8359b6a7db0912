-- The task text is stored once per batch run: a run whose prompt is its batch's own (every run
-- of a repeated batch) keeps no copy of it. `own_prompt` holds a run's prompt only when it
-- differs from the batch's (a generated worker's task, a candidate's or reviewer's text);
-- NULL means the batch's `prompt` in `config_json`, which store/batches reads through
-- coalesce. Old rows keep serving: their copies are kept where they differ, dropped where equal.

ALTER TABLE batch_runs ADD COLUMN own_prompt TEXT;

UPDATE batch_runs SET own_prompt = prompt
    WHERE prompt IS NOT (SELECT json_extract(b.config_json, '$.prompt') FROM batches b
                         WHERE b.id = batch_runs.batch_id);

ALTER TABLE batch_runs DROP COLUMN prompt;
