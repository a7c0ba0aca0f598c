-- One state vocabulary for every leased table: pending, in_progress,
-- completed, failed. The inbox's 'processing' and the HTTP keys' 'pending'
-- both meant in_progress; the outbox's 'published' and 'parked' are its
-- completed and failed.
ALTER TABLE {{t}}inbox DROP CONSTRAINT {{p}}inbox_state_check;
UPDATE {{t}}inbox SET state = 'in_progress' WHERE state = 'processing';
ALTER TABLE {{t}}inbox ADD CONSTRAINT {{p}}inbox_state_check CHECK (state IN ('in_progress', 'completed', 'failed'));

ALTER TABLE {{t}}idempotency_keys DROP CONSTRAINT {{p}}idempotency_keys_state_check;
UPDATE {{t}}idempotency_keys SET state = 'in_progress' WHERE state = 'pending';
ALTER TABLE {{t}}idempotency_keys ALTER COLUMN state SET DEFAULT 'in_progress';
ALTER TABLE {{t}}idempotency_keys ADD CONSTRAINT {{p}}idempotency_keys_state_check CHECK (state IN ('in_progress', 'completed', 'failed'));

ALTER TABLE {{t}}outbox DROP CONSTRAINT {{p}}outbox_state_check;
UPDATE {{t}}outbox SET state = 'completed' WHERE state = 'published';
UPDATE {{t}}outbox SET state = 'failed' WHERE state = 'parked';
ALTER TABLE {{t}}outbox ADD CONSTRAINT {{p}}outbox_state_check CHECK (state IN ('pending', 'completed', 'failed'));
