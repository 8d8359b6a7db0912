-- The task text is stored once: an agent's task is the `prompt` of its execution number 1 (each
-- execution keeps the input it was started with: the task, or a resume's or follow-up's prompt).
-- `agents.task` held a second copy, and version-1 plans (no `plan_version`) a third; both go.

ALTER TABLE agents DROP COLUMN task;

UPDATE executions SET plan_json = json_remove(plan_json, '$.prompt')
    WHERE json_type(plan_json, '$.plan_version') IS NULL AND json_type(plan_json, '$.prompt') IS NOT NULL;
