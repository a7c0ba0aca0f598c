-- The effect ledger: one row per external side effect, keyed by the effect
-- key that is also handed to the provider as its idempotency key.
-- kind = '' marks an inline effect.Do guard (never claimed by a worker).
-- Timestamps are microseconds since the Unix epoch (UTC); 0 = unset.
CREATE TABLE {{t}}effects (
    effect_key      VARBINARY(1024) NOT NULL PRIMARY KEY,
    kind            VARBINARY(255)  NOT NULL,
    payload         LONGBLOB        NOT NULL,
    fingerprint     VARBINARY(255)  NOT NULL,
    state           VARBINARY(16)   NOT NULL DEFAULT 'pending',
    attempts        INT             NOT NULL DEFAULT 0,
    token           BIGINT          NOT NULL DEFAULT 0,
    lease_until     BIGINT          NOT NULL DEFAULT 0,
    next_attempt_at BIGINT          NOT NULL DEFAULT 0,
    result          LONGBLOB,
    last_error      LONGBLOB        NOT NULL DEFAULT (''),
    created_at      BIGINT          NOT NULL,
    updated_at      BIGINT          NOT NULL,
    completed_at    BIGINT          NOT NULL DEFAULT 0,
    expires_at      BIGINT          NOT NULL DEFAULT 0,
    CONSTRAINT {{p}}effects_state_check CHECK (state IN ('pending', 'in_progress', 'completed', 'failed'))
) ENGINE=InnoDB;
CREATE INDEX {{p}}effects_due_idx ON {{t}}effects (kind, next_attempt_at);
CREATE INDEX {{p}}effects_expires_idx ON {{t}}effects (expires_at);
CREATE INDEX {{p}}effects_state_idx ON {{t}}effects (state, updated_at);
