-- Reset credits (docs/capacity.md): the rate-limit resets the account can still redeem, as a
-- reading reports them (Codex's `rateLimitResetCredits.availableCount`, a collector's
-- `reset_credits`); null when the reading does not say.
ALTER TABLE capacity_samples ADD COLUMN reset_credits INTEGER
    CHECK (reset_credits IS NULL OR reset_credits >= 0);
