-- HTTP Idempotency-Key records: one row per (tenant, operation, key).
-- See the PostgreSQL migration for the states; token is the fencing token.
-- Timestamps are microseconds since the Unix epoch (UTC).
CREATE TABLE {{t}}idempotency_keys (
    tenant        VARBINARY(255)  NOT NULL,
    operation     VARBINARY(512)  NOT NULL,
    idem_key      VARBINARY(1024) NOT NULL,
    fingerprint   VARBINARY(255)  NOT NULL,
    state         VARBINARY(16)   NOT NULL DEFAULT 'pending',
    token         BIGINT          NOT NULL DEFAULT 1,
    status        INT             NOT NULL DEFAULT 0,
    headers       LONGBLOB        NOT NULL DEFAULT ('{}'),
    body          LONGBLOB        NOT NULL DEFAULT (''),
    body_omitted  INT             NOT NULL DEFAULT 0,
    resource_type LONGBLOB        NOT NULL DEFAULT (''),
    resource_id   LONGBLOB        NOT NULL DEFAULT (''),
    created_at    BIGINT          NOT NULL,
    locked_until  BIGINT          NOT NULL DEFAULT 0,
    completed_at  BIGINT          NOT NULL DEFAULT 0,
    expires_at    BIGINT          NOT NULL,
    PRIMARY KEY (tenant, operation, idem_key),
    CONSTRAINT {{p}}idempotency_keys_state_check CHECK (state IN ('pending', 'completed', 'failed'))
) ENGINE=InnoDB;
CREATE INDEX {{p}}idempotency_keys_expires_idx ON {{t}}idempotency_keys (expires_at);
CREATE INDEX {{p}}idempotency_keys_state_idx ON {{t}}idempotency_keys (state, created_at);
