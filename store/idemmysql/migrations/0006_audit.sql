-- The operator audit log: one row per action taken through the console,
-- written 'started' before the action runs and updated afterwards.
-- Timestamps are microseconds since the Unix epoch (UTC).
CREATE TABLE {{t}}audit_log (
    id       BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at       BIGINT          NOT NULL,
    actor    VARBINARY(1024) NOT NULL,
    action   VARBINARY(1024) NOT NULL,
    target   LONGBLOB        NOT NULL DEFAULT (''),
    reason   LONGBLOB        NOT NULL DEFAULT (''),
    details  LONGBLOB        NOT NULL DEFAULT (''),
    outcome  LONGBLOB        NOT NULL DEFAULT ('started'),
    ended_at BIGINT          NOT NULL DEFAULT 0
) ENGINE=InnoDB;
CREATE INDEX {{p}}audit_log_at_idx ON {{t}}audit_log (at);
