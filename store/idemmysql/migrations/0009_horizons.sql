-- Replay horizons enforced (issue 21): an effect's first attempt and hold
-- times, and why a dead letter was force-redriven.
ALTER TABLE {{t}}effects ADD COLUMN first_attempt_at BIGINT NOT NULL DEFAULT 0, ADD COLUMN held_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE {{t}}dead_letters ADD COLUMN redrive_reason LONGBLOB NOT NULL DEFAULT ('');
