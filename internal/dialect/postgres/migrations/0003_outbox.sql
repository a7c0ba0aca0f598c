-- The transactional outbox: events written in the caller's transaction and
-- published by the relay. Timestamps are microseconds since the Unix epoch.
-- The relay claims rows by state (never by a high-water seq), so rows of
-- transactions that commit late are never skipped.
CREATE TABLE {{t}}outbox (
    seq             bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source          text    NOT NULL,
    event_id        text    NOT NULL,
    type            text    NOT NULL,
    subject         text    NOT NULL,             -- broker subject / topic
    ce_subject      text    NOT NULL DEFAULT '',  -- CloudEvents subject
    time            bigint  NOT NULL,
    datacontenttype text    NOT NULL DEFAULT '',
    ordering_key    text    NOT NULL DEFAULT '',
    headers         text    NOT NULL DEFAULT '{}',
    payload         bytea   NOT NULL,
    state           text    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'published', 'parked')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text    NOT NULL DEFAULT '',
    next_attempt_at bigint  NOT NULL DEFAULT 0,
    claimed_by      text    NOT NULL DEFAULT '',
    claim_until     bigint  NOT NULL DEFAULT 0,
    created_at      bigint  NOT NULL,
    published_at    bigint  NOT NULL DEFAULT 0,
    UNIQUE (source, event_id)
);
-- Claim scan: pending rows in seq order.
CREATE INDEX {{p}}outbox_pending_idx ON {{t}}outbox (seq) WHERE state = 'pending';
-- Per-key order probe: the rows that may block later rows of their key
-- (parked, or pending with a claim or a retry time). Fresh pending and
-- published rows are not in it, so the probe is one index descent per
-- candidate whatever the backlog; the claim repeats this predicate verbatim
-- so the planner can use the index.
CREATE INDEX {{p}}outbox_block_idx ON {{t}}outbox (ordering_key, seq)
    WHERE ordering_key <> '' AND (state = 'parked' OR (state = 'pending' AND (claim_until > 0 OR next_attempt_at > 0)));
-- Retention: published rows by age.
CREATE INDEX {{p}}outbox_published_idx ON {{t}}outbox (published_at) WHERE state = 'published';
-- Single-writer relay leases (used on SQLite; one row per relay group).
CREATE TABLE {{t}}outbox_lease (
    name        text   PRIMARY KEY,
    holder      text   NOT NULL,
    lease_until bigint NOT NULL
);
