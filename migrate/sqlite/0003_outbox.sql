-- The transactional outbox: events written in the caller's transaction and
-- published by the relay. Timestamps are microseconds since the Unix epoch.
-- The relay claims rows by state (never by a high-water seq), so rows of
-- transactions that commit late are never skipped.
CREATE TABLE {{t}}outbox (
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
                    CHECK (state IN ('pending', 'published', 'parked')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text    NOT NULL DEFAULT '',
    next_attempt_at integer NOT NULL DEFAULT 0,
    claimed_by      text    NOT NULL DEFAULT '',
    claim_until     integer NOT NULL DEFAULT 0,
    created_at      integer NOT NULL,
    published_at    integer NOT NULL DEFAULT 0,
    UNIQUE (source, event_id)
);
-- Claim scan: pending rows in seq order.
CREATE INDEX {{p}}outbox_pending_idx ON {{t}}outbox (seq) WHERE state = 'pending';
-- Per-key order probe: earlier unpublished rows of the same ordering key.
CREATE INDEX {{p}}outbox_key_idx ON {{t}}outbox (ordering_key, seq) WHERE state <> 'published';
-- Retention: published rows by age.
CREATE INDEX {{p}}outbox_published_idx ON {{t}}outbox (published_at) WHERE state = 'published';
-- Single-writer relay leases (used on SQLite; one row per relay group).
CREATE TABLE {{t}}outbox_lease (
    name        text   PRIMARY KEY,
    holder      text   NOT NULL,
    lease_until integer NOT NULL
);
