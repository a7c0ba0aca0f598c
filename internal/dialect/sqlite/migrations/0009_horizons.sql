-- Replay horizons enforced (issue 21).
--
-- Provider key lifetimes: first_attempt_at is when the worker
-- first claimed the effect, i.e. when its key may first have reached the
-- provider (0 = never claimed); held_at is when the worker held the effect
-- for reconciliation instead of calling the provider again with a key older
-- than the provider's key lifetime (0 = not held). A held effect stays
-- in_progress with no lease and is never claimed until an operator resolves
-- or retries it.
ALTER TABLE {{t}}effects ADD COLUMN first_attempt_at integer NOT NULL DEFAULT 0;
ALTER TABLE {{t}}effects ADD COLUMN held_at integer NOT NULL DEFAULT 0;
-- A dead letter redriven with --force past a replay-horizon refusal records
-- why (empty for an ordinary redrive).
ALTER TABLE {{t}}dead_letters ADD COLUMN redrive_reason text NOT NULL DEFAULT '';
