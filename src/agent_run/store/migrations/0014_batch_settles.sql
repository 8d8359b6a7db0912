-- A batch is announced each time it settles (issue 16): `settles` counts its moves into a state
-- that waits on the user or ends it (blocked, completed, failed, cancelled), so a batch that is
-- reopened and settles again gets a new notice (its subject `<batch id>:<settles>`), and a
-- blocked one gets one too. A batch settled before this counts one settle, and its notice
-- (subject the bare batch id until now) is that settle's.
ALTER TABLE batches ADD COLUMN settles INTEGER NOT NULL DEFAULT 0;
UPDATE batches SET settles = 1 WHERE state IN ('blocked', 'completed', 'failed', 'cancelled');
UPDATE notices SET subject = subject || ':1' WHERE subject IN (SELECT id FROM batches);
