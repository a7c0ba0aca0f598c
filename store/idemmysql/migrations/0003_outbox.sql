-- The transactional outbox: events written in the caller's transaction and
-- published by the relay. Timestamps are microseconds since the Unix epoch.
-- The relay claims rows by state (never by a high-water seq), so rows of
-- transactions that commit late are never skipped.
CREATE TABLE {{t}}outbox (
    seq             BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    source          VARBINARY(255)  NOT NULL,
    event_id        VARBINARY(1024) NOT NULL,
    type            LONGBLOB        NOT NULL,
    subject         LONGBLOB        NOT NULL,
    ce_subject      LONGBLOB        NOT NULL DEFAULT (''),
    time            BIGINT          NOT NULL,
    datacontenttype LONGBLOB        NOT NULL DEFAULT (''),
    ordering_key    VARBINARY(1024) NOT NULL DEFAULT '',
    headers         LONGBLOB        NOT NULL DEFAULT ('{}'),
    payload         LONGBLOB        NOT NULL,
    state           VARBINARY(16)   NOT NULL DEFAULT 'pending',
    attempts        INT             NOT NULL DEFAULT 0,
    last_error      LONGBLOB        NOT NULL DEFAULT (''),
    next_attempt_at BIGINT          NOT NULL DEFAULT 0,
    claimed_by      VARBINARY(255)  NOT NULL DEFAULT '',
    claim_until     BIGINT          NOT NULL DEFAULT 0,
    created_at      BIGINT          NOT NULL,
    published_at    BIGINT          NOT NULL DEFAULT 0,
    UNIQUE KEY {{p}}outbox_event_uq (source, event_id),
    CONSTRAINT {{p}}outbox_state_check CHECK (state IN ('pending', 'published', 'parked'))
) ENGINE=InnoDB;
-- Claim scan: pending rows in seq order.
CREATE INDEX {{p}}outbox_pending_idx ON {{t}}outbox (state, seq);
-- Per-key order probe.
CREATE INDEX {{p}}outbox_block_idx ON {{t}}outbox (ordering_key, seq);
-- Retention: published rows by age.
CREATE INDEX {{p}}outbox_published_idx ON {{t}}outbox (state, published_at);
-- The single-writer relay lease: relays take turns (one row per relay group).
CREATE TABLE {{t}}outbox_lease (
    name        VARBINARY(255) NOT NULL PRIMARY KEY,
    holder      VARBINARY(255) NOT NULL,
    lease_until BIGINT         NOT NULL
) ENGINE=InnoDB;
-- MySQL only: one row per ordering key ever enqueued. An enqueuer locks the
-- rows of its keys (INSERT … ON DUPLICATE KEY UPDATE, in key order) before
-- its events get their seqs, so the events of one key get their seqs in
-- commit order: the transaction of a later seq starts inserting only after
-- the earlier one committed (PostgreSQL takes advisory locks instead).
CREATE TABLE {{t}}outbox_keys (
    ordering_key VARBINARY(1024) NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
