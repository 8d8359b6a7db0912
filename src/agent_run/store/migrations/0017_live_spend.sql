-- Spend caps enforced as the usage arrives (docs/engines.md, "Spend caps"), and costs priced by
-- the user's price table (docs/capacity.md, "Usage").
--
-- A batch run's execution shares its batch's caps: `spend_group` is the batch id and
-- `spend_group_max_tokens` / `spend_group_max_cost_usd` its caps, so the supervisor stops the
-- run once the group's reported total (every execution of the group, running ones included:
-- they write their usage as it arrives) passes one. NULL: no group.
ALTER TABLE executions ADD COLUMN spend_group TEXT;
ALTER TABLE executions ADD COLUMN spend_group_max_tokens INTEGER;
ALTER TABLE executions ADD COLUMN spend_group_max_cost_usd REAL;
CREATE INDEX executions_spend_group ON executions (spend_group) WHERE spend_group IS NOT NULL;

-- The `[prices]` entry of the execution's runtime:model when it was admitted (USD per million
-- input / output tokens), used only when the engine reports no cost; `cost_source` says where
-- `cost_usd` came from. NULL: no price, no cost source.
ALTER TABLE executions ADD COLUMN price_input_per_mtok REAL;
ALTER TABLE executions ADD COLUMN price_output_per_mtok REAL;
ALTER TABLE executions ADD COLUMN cost_source TEXT CHECK (cost_source IN ('engine', 'price_table'));

-- The caps a batch run's current attempt was given (what was left of the batch's caps when the
-- attempt began), committed with the attempt number so a restarted daemon repeats the same
-- start request for it.
ALTER TABLE batch_runs ADD COLUMN attempt_max_tokens INTEGER;
ALTER TABLE batch_runs ADD COLUMN attempt_max_cost_usd REAL;
