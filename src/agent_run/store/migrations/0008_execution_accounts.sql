-- Accounts and spend caps. `account`: the runtime account an execution runs on (`[runtimes.X.accounts.LABEL]`), NULL for
-- the runtime's own `auth`. A resume copies it: a run never changes account.

ALTER TABLE executions ADD COLUMN account TEXT;

-- Spend caps (`start --max-tokens / --max-cost-usd`): the supervisor stops the run when its
-- reported usage passes one (`failed` / `budget_exceeded`). NULL: no cap.
ALTER TABLE executions ADD COLUMN max_tokens INTEGER;
ALTER TABLE executions ADD COLUMN max_cost_usd REAL;
