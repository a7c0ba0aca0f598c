-- HTTP Idempotency-Key records: one row per (tenant, operation, key).
-- state: pending (executing; in two-phase mode leased until locked_until),
-- completed (response stored), failed (held for an operator after a lease
-- expired under the Hold policy). token is the fencing token, bumped on every
-- takeover. body_omitted = 1 when the response body exceeded the stored-body
-- cap (status and allow-listed headers such as Location are kept).
-- Timestamps are microseconds since the Unix epoch (UTC); a row whose
-- expires_at has passed is treated as absent and deleted by the GC.
CREATE TABLE {{t}}idempotency_keys (
    tenant        text    NOT NULL,
    operation     text    NOT NULL,
    idem_key      text    NOT NULL,
    fingerprint   bytea   NOT NULL,
    state         text    NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'completed', 'failed')),
    token         bigint  NOT NULL DEFAULT 1,
    status        integer NOT NULL DEFAULT 0,
    headers       text    NOT NULL DEFAULT '{}',
    body          bytea   NOT NULL DEFAULT ''::bytea,
    body_omitted  integer NOT NULL DEFAULT 0,
    resource_type text    NOT NULL DEFAULT '',
    resource_id   text    NOT NULL DEFAULT '',
    created_at    bigint  NOT NULL,
    locked_until  bigint  NOT NULL DEFAULT 0,
    completed_at  bigint  NOT NULL DEFAULT 0,
    expires_at    bigint  NOT NULL,
    PRIMARY KEY (tenant, operation, idem_key)
);
CREATE INDEX {{p}}idempotency_keys_expires_idx ON {{t}}idempotency_keys (expires_at);
