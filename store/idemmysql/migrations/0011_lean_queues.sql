-- Fewer index entries per queued row (issue 13) is a PostgreSQL change: on
-- MySQL the outbox's seq is InnoDB's clustered primary key (it costs no
-- index entry of its own) and the inbox keeps its B-tree on expires_at
-- (MySQL has no BRIN). The file keeps the dialects' migration lists in step.
DO 0;
