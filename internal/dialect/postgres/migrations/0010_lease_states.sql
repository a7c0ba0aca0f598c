-- One state vocabulary for every leased table: pending (waiting to be
-- claimed), in_progress (owned under a lease), completed (finalised by the
-- owner holding the token), failed (ended without success; kept for an
-- operator). The inbox's 'processing' and the HTTP keys' 'pending' both
-- meant in_progress; the outbox's 'published' and 'parked' are its
-- completed and failed.
ALTER TABLE {{t}}inbox DROP CONSTRAINT IF EXISTS inbox_state_check;
DROP INDEX IF EXISTS {{t}}inbox_processing_idx;
UPDATE {{t}}inbox SET state = 'in_progress' WHERE state = 'processing';
ALTER TABLE {{t}}inbox ADD CONSTRAINT inbox_state_check CHECK (state IN ('in_progress', 'completed', 'failed'));
CREATE INDEX {{p}}inbox_in_progress_idx ON {{t}}inbox (consumer, lease_until) WHERE state = 'in_progress';

ALTER TABLE {{t}}idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_state_check;
UPDATE {{t}}idempotency_keys SET state = 'in_progress' WHERE state = 'pending';
ALTER TABLE {{t}}idempotency_keys ALTER COLUMN state SET DEFAULT 'in_progress';
ALTER TABLE {{t}}idempotency_keys ADD CONSTRAINT idempotency_keys_state_check CHECK (state IN ('in_progress', 'completed', 'failed'));

ALTER TABLE {{t}}outbox DROP CONSTRAINT IF EXISTS outbox_state_check;
DROP INDEX IF EXISTS {{t}}outbox_block_idx;
DROP INDEX IF EXISTS {{t}}outbox_published_idx;
UPDATE {{t}}outbox SET state = 'completed' WHERE state = 'published';
UPDATE {{t}}outbox SET state = 'failed' WHERE state = 'parked';
ALTER TABLE {{t}}outbox ADD CONSTRAINT outbox_state_check CHECK (state IN ('pending', 'completed', 'failed'));
CREATE INDEX {{p}}outbox_block_idx ON {{t}}outbox (ordering_key, seq)
    WHERE ordering_key <> '' AND (state = 'failed' OR (state = 'pending' AND (claim_until > 0 OR next_attempt_at > 0)));
CREATE INDEX {{p}}outbox_completed_idx ON {{t}}outbox (published_at) WHERE state = 'completed';
