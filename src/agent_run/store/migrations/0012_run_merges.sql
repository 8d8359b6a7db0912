-- Merge-back of a run (`run_merge`): the branch a batch's base_ref named (or HEAD was on) when it
-- was created, the default target of a merge; and on each run what was merged where: the new
-- commit on the target (`merged_sha`), the target branch, and the run branch's tip that went in
-- (`batch clean` treats the branch as merged while its tip is still that commit).
ALTER TABLE batches ADD COLUMN base_branch TEXT;
ALTER TABLE batch_runs ADD COLUMN merged_sha TEXT;
ALTER TABLE batch_runs ADD COLUMN merged_into TEXT;
ALTER TABLE batch_runs ADD COLUMN merged_head TEXT;
