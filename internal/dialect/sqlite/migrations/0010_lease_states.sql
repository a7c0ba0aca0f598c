-- One state vocabulary for every leased table: pending (waiting to be
-- claimed), in_progress (owned under a lease), completed (finalised by the
-- owner holding the token), failed (ended without success; kept for an
-- operator). The inbox's 'processing' and the HTTP keys' 'pending' both
-- meant in_progress; the outbox's 'published' and 'parked' are its
-- completed and failed. SQLite cannot alter a CHECK constraint, so each
-- table is rebuilt with its rows (and the outbox's sequence) carried over.
CREATE TABLE {{t}}inbox_new (
    consumer     text    NOT NULL,
    message_id   text    NOT NULL,
    fingerprint  blob    NOT NULL,
    state        text    NOT NULL DEFAULT 'completed'
                 CHECK (state IN ('in_progress', 'completed', 'failed')),
    token        integer NOT NULL DEFAULT 1,
    attempts     integer NOT NULL DEFAULT 1,
    lease_until  integer NOT NULL DEFAULT 0,
    received_at  integer NOT NULL,
    processed_at integer NOT NULL DEFAULT 0,
    expires_at   integer NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
INSERT INTO {{t}}inbox_new (consumer, message_id, fingerprint, state, token, attempts, lease_until, received_at, processed_at, expires_at)
    SELECT consumer, message_id, fingerprint, CASE state WHEN 'processing' THEN 'in_progress' ELSE state END,
           token, attempts, lease_until, received_at, processed_at, expires_at FROM {{t}}inbox;
DROP TABLE {{t}}inbox;
ALTER TABLE {{t}}inbox_new RENAME TO {{p}}inbox;
CREATE INDEX {{p}}inbox_expires_idx ON {{t}}inbox (expires_at);
CREATE INDEX {{p}}inbox_in_progress_idx ON {{t}}inbox (consumer, lease_until) WHERE state = 'in_progress';

CREATE TABLE {{t}}idempotency_keys_new (
    tenant        text    NOT NULL,
    operation     text    NOT NULL,
    idem_key      text    NOT NULL,
    fingerprint   blob    NOT NULL,
    state         text    NOT NULL DEFAULT 'in_progress'
                  CHECK (state IN ('in_progress', 'completed', 'failed')),
    token         integer NOT NULL DEFAULT 1,
    status        integer NOT NULL DEFAULT 0,
    headers       text    NOT NULL DEFAULT '{}',
    body          blob    NOT NULL DEFAULT x'',
    body_omitted  integer NOT NULL DEFAULT 0,
    resource_type text    NOT NULL DEFAULT '',
    resource_id   text    NOT NULL DEFAULT '',
    created_at    integer NOT NULL,
    locked_until  integer NOT NULL DEFAULT 0,
    completed_at  integer NOT NULL DEFAULT 0,
    expires_at    integer NOT NULL,
    PRIMARY KEY (tenant, operation, idem_key)
);
INSERT INTO {{t}}idempotency_keys_new (tenant, operation, idem_key, fingerprint, state, token, status, headers, body, body_omitted,
        resource_type, resource_id, created_at, locked_until, completed_at, expires_at)
    SELECT tenant, operation, idem_key, fingerprint, CASE state WHEN 'pending' THEN 'in_progress' ELSE state END, token, status,
           headers, body, body_omitted, resource_type, resource_id, created_at, locked_until, completed_at, expires_at
    FROM {{t}}idempotency_keys;
DROP TABLE {{t}}idempotency_keys;
ALTER TABLE {{t}}idempotency_keys_new RENAME TO {{p}}idempotency_keys;
CREATE INDEX {{p}}idempotency_keys_expires_idx ON {{t}}idempotency_keys (expires_at);

CREATE TABLE {{t}}outbox_new (
    seq             integer PRIMARY KEY AUTOINCREMENT,
    source          text    NOT NULL,
    event_id        text    NOT NULL,
    type            text    NOT NULL,
    subject         text    NOT NULL,             -- broker subject / topic
    ce_subject      text    NOT NULL DEFAULT '',  -- CloudEvents subject
    time            integer NOT NULL,
    datacontenttype text    NOT NULL DEFAULT '',
    ordering_key    text    NOT NULL DEFAULT '',
    headers         text    NOT NULL DEFAULT '{}',
    payload         blob    NOT NULL,
    state           text    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'completed', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text    NOT NULL DEFAULT '',
    next_attempt_at integer NOT NULL DEFAULT 0,
    claimed_by      text    NOT NULL DEFAULT '',
    claim_until     integer NOT NULL DEFAULT 0,
    created_at      integer NOT NULL,
    published_at    integer NOT NULL DEFAULT 0,
    traceparent     text    NOT NULL DEFAULT '',
    tracestate      text    NOT NULL DEFAULT '',
    UNIQUE (source, event_id)
);
INSERT INTO {{t}}outbox_new (seq, source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload,
        state, attempts, last_error, next_attempt_at, claimed_by, claim_until, created_at, published_at, traceparent, tracestate)
    SELECT seq, source, event_id, type, subject, ce_subject, time, datacontenttype, ordering_key, headers, payload,
           CASE state WHEN 'published' THEN 'completed' WHEN 'parked' THEN 'failed' ELSE state END,
           attempts, last_error, next_attempt_at, claimed_by, claim_until, created_at, published_at, traceparent, tracestate
    FROM {{t}}outbox;
-- Keep the sequence where it was, so a pruned event's seq is never reused.
DELETE FROM sqlite_sequence WHERE name = '{{p}}outbox_new';
INSERT INTO sqlite_sequence (name, seq) SELECT '{{p}}outbox_new', seq FROM sqlite_sequence WHERE name = '{{p}}outbox';
DROP TABLE {{t}}outbox;
ALTER TABLE {{t}}outbox_new RENAME TO {{p}}outbox;
CREATE INDEX {{p}}outbox_pending_idx ON {{t}}outbox (seq) WHERE state = 'pending';
CREATE INDEX {{p}}outbox_block_idx ON {{t}}outbox (ordering_key, seq)
    WHERE ordering_key <> '' AND (state = 'failed' OR (state = 'pending' AND (claim_until > 0 OR next_attempt_at > 0)));
CREATE INDEX {{p}}outbox_completed_idx ON {{t}}outbox (published_at) WHERE state = 'completed';
