-- The operator audit log: one row per action taken through the console
-- (redrive, discard, revise, resolve, release, forget, retry, …): who did
-- it, when, on what, why, and how it ended. A row is written with outcome
-- 'started' before the action runs and updated afterwards ('ok' or
-- 'failed: …'), so an action interrupted by a crash is still on record.
-- Timestamps are microseconds since the Unix epoch (UTC).
CREATE TABLE {{t}}audit_log (
    id       bigserial PRIMARY KEY,
    at       bigint  NOT NULL,
    actor    text    NOT NULL,
    action   text    NOT NULL,
    target   text    NOT NULL DEFAULT '',
    reason   text    NOT NULL DEFAULT '',
    details  text    NOT NULL DEFAULT '',
    outcome  text    NOT NULL DEFAULT 'started',
    ended_at bigint  NOT NULL DEFAULT 0
);
CREATE INDEX {{p}}audit_log_at_idx ON {{t}}audit_log (at);
