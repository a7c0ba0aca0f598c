-- The idempotent consumer's inbox: one row per (consumer, message id).
-- Timestamps are microseconds since the Unix epoch (UTC). Identifiers are
-- VARBINARY: compared byte for byte like PostgreSQL's text (no collation
-- folds case or ignores trailing spaces), within InnoDB's 3072-byte key.
CREATE TABLE {{t}}inbox (
    consumer     VARBINARY(255)  NOT NULL,
    message_id   VARBINARY(2048) NOT NULL,
    fingerprint  VARBINARY(255)  NOT NULL,
    state        VARBINARY(16)   NOT NULL DEFAULT 'completed',
    token        BIGINT          NOT NULL DEFAULT 1,
    attempts     INT             NOT NULL DEFAULT 1,
    lease_until  BIGINT          NOT NULL DEFAULT 0,
    received_at  BIGINT          NOT NULL,
    processed_at BIGINT          NOT NULL DEFAULT 0,
    expires_at   BIGINT          NOT NULL,
    PRIMARY KEY (consumer, message_id),
    CONSTRAINT {{p}}inbox_state_check CHECK (state IN ('processing', 'completed', 'failed'))
) ENGINE=InnoDB;
CREATE INDEX {{p}}inbox_expires_idx ON {{t}}inbox (expires_at);
-- MySQL has no partial indexes: the lease scan's index leads with state.
CREATE INDEX {{p}}inbox_lease_idx ON {{t}}inbox (consumer, state, lease_until);
