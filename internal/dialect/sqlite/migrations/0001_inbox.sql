-- The idempotent consumer's inbox: one row per (consumer, message id).
-- Timestamps are microseconds since the Unix epoch (UTC).
CREATE TABLE {{t}}inbox (
    consumer     text    NOT NULL,
    message_id   text    NOT NULL,
    fingerprint  blob    NOT NULL,
    state        text    NOT NULL DEFAULT 'completed'
                 CHECK (state IN ('processing', 'completed', 'failed')),
    token        integer NOT NULL DEFAULT 1,
    attempts     integer NOT NULL DEFAULT 1,
    lease_until  integer NOT NULL DEFAULT 0,
    received_at  integer NOT NULL,
    processed_at integer NOT NULL DEFAULT 0,
    expires_at   integer NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX {{p}}inbox_expires_idx ON {{t}}inbox (expires_at);
CREATE INDEX {{p}}inbox_processing_idx ON {{t}}inbox (consumer, lease_until) WHERE state = 'processing';
