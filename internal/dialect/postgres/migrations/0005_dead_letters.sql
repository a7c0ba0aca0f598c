-- The dead-letter store: messages a consumer could not process, with
-- everything an operator needs to decide (redrive or discard).
-- A message parked again while its letter is still parked (same consumer,
-- message id and payload fingerprint) updates that letter (attempts, error,
-- last failure) instead of adding a row: see the partial unique index.
-- Timestamps are microseconds since the Unix epoch (UTC), 0 = never.
CREATE TABLE {{t}}dead_letters (
    id              bigserial PRIMARY KEY,
    consumer        text    NOT NULL,
    source          text    NOT NULL DEFAULT '',
    position        text    NOT NULL DEFAULT '',
    message_id      text    NOT NULL,
    msg_key         text    NOT NULL DEFAULT '',
    headers         text    NOT NULL DEFAULT '{}',
    payload         bytea   NOT NULL,
    fingerprint     bytea   NOT NULL,
    error           text    NOT NULL DEFAULT '',
    error_class     text    NOT NULL DEFAULT '',
    attempts        integer NOT NULL DEFAULT 1,
    first_failed_at bigint  NOT NULL,
    last_failed_at  bigint  NOT NULL,
    state           text    NOT NULL DEFAULT 'parked'
                    CHECK (state IN ('parked', 'redriven', 'discarded')),
    redriven_by     text    NOT NULL DEFAULT '',
    redriven_at     bigint  NOT NULL DEFAULT 0,
    resolved_by     text    NOT NULL DEFAULT '',
    resolved_at     bigint  NOT NULL DEFAULT 0,
    created_at      bigint  NOT NULL
);
CREATE UNIQUE INDEX {{p}}dead_letters_parked_uq ON {{t}}dead_letters (consumer, message_id, fingerprint) WHERE state = 'parked';
CREATE INDEX {{p}}dead_letters_state_idx ON {{t}}dead_letters (state, consumer, last_failed_at);
CREATE INDEX {{p}}dead_letters_resolved_idx ON {{t}}dead_letters (resolved_at) WHERE state <> 'parked';
