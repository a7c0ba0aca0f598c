-- The effect ledger: one row per external side effect, keyed by the effect
-- key that is also handed to the provider as its idempotency key.
-- kind = '' marks an inline effect.Do guard (never claimed by a worker).
-- Timestamps are microseconds since the Unix epoch (UTC); 0 = unset.
-- next_attempt_at is when a pending row is due; for an in_progress row it
-- equals lease_until (due for recovery once the lease has run out).
CREATE TABLE {{t}}effects (
    effect_key      text    NOT NULL PRIMARY KEY,
    kind            text    NOT NULL,
    payload         blob    NOT NULL,
    fingerprint     blob    NOT NULL,
    state           text    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'in_progress', 'completed', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    token           integer NOT NULL DEFAULT 0,
    lease_until     integer NOT NULL DEFAULT 0,
    next_attempt_at integer NOT NULL DEFAULT 0,
    result          blob,
    last_error      text    NOT NULL DEFAULT '',
    created_at      integer NOT NULL,
    updated_at      integer NOT NULL,
    completed_at    integer NOT NULL DEFAULT 0,
    expires_at      integer NOT NULL DEFAULT 0
);
CREATE INDEX {{p}}effects_due_idx ON {{t}}effects (next_attempt_at) WHERE state IN ('pending', 'in_progress');
CREATE INDEX {{p}}effects_expires_idx ON {{t}}effects (expires_at) WHERE expires_at > 0;
CREATE INDEX {{p}}effects_failed_idx ON {{t}}effects (kind, updated_at) WHERE state = 'failed';
