-- The dead-letter store: messages a consumer could not process.
-- A message parked again while its letter is still parked (same consumer,
-- message id and payload fingerprint) updates that letter instead of adding
-- a row. MySQL has no partial unique index: parked is 1 for a parked letter
-- and NULL otherwise, and NULLs never collide in a unique key, so the key
-- allows one parked letter and any number of resolved ones.
-- Timestamps are microseconds since the Unix epoch (UTC), 0 = never.
CREATE TABLE {{t}}dead_letters (
    id              BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer        VARBINARY(255)  NOT NULL,
    source          LONGBLOB        NOT NULL DEFAULT (''),
    position        LONGBLOB        NOT NULL DEFAULT (''),
    message_id      VARBINARY(2048) NOT NULL,
    msg_key         LONGBLOB        NOT NULL DEFAULT (''),
    headers         LONGBLOB        NOT NULL DEFAULT ('{}'),
    payload         LONGBLOB        NOT NULL,
    fingerprint     VARBINARY(255)  NOT NULL,
    error           LONGBLOB        NOT NULL DEFAULT (''),
    error_class     VARBINARY(255)  NOT NULL DEFAULT '',
    attempts        INT             NOT NULL DEFAULT 1,
    first_failed_at BIGINT          NOT NULL,
    last_failed_at  BIGINT          NOT NULL,
    state           VARBINARY(16)   NOT NULL DEFAULT 'parked',
    redriven_by     LONGBLOB        NOT NULL DEFAULT (''),
    redriven_at     BIGINT          NOT NULL DEFAULT 0,
    resolved_by     LONGBLOB        NOT NULL DEFAULT (''),
    resolved_at     BIGINT          NOT NULL DEFAULT 0,
    created_at      BIGINT          NOT NULL,
    parked          TINYINT AS (IF(state = 'parked', 1, NULL)) STORED,
    UNIQUE KEY {{p}}dead_letters_parked_uq (consumer, message_id, fingerprint, parked),
    CONSTRAINT {{p}}dead_letters_state_check CHECK (state IN ('parked', 'redriven', 'discarded'))
) ENGINE=InnoDB;
CREATE INDEX {{p}}dead_letters_state_idx ON {{t}}dead_letters (state, consumer, last_failed_at);
CREATE INDEX {{p}}dead_letters_resolved_idx ON {{t}}dead_letters (resolved_at);
