-- Accounts: the runtime account an execution runs on (`[runtimes.X.accounts.LABEL]`), NULL for
-- the runtime's own `auth`. A resume copies it: a run never changes account.

ALTER TABLE executions ADD COLUMN account TEXT;
