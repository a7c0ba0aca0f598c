-- The idempotent consumer's inbox: one row per (consumer, message id).
-- Timestamps are microseconds since the Unix epoch (UTC).
CREATE TABLE {{t}}inbox (
    consumer     text    NOT NULL,
    message_id   text    NOT NULL,
    fingerprint  bytea   NOT NULL,
    state        text    NOT NULL DEFAULT 'completed'
                 CHECK (state IN ('processing', 'completed', 'failed')),
    token        bigint  NOT NULL DEFAULT 1,
    attempts     integer NOT NULL DEFAULT 1,
    lease_until  bigint  NOT NULL DEFAULT 0,
    received_at  bigint  NOT NULL,
    processed_at bigint  NOT NULL DEFAULT 0,
    expires_at   bigint  NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX {{p}}inbox_expires_idx ON {{t}}inbox (expires_at);
CREATE INDEX {{p}}inbox_processing_idx ON {{t}}inbox (consumer, lease_until) WHERE state = 'processing';
