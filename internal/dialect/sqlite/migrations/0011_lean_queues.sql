-- Fewer index entries per queued row (issue 13) is a PostgreSQL change: on
-- SQLite the outbox's seq is the rowid (its primary key costs no entry of
-- its own) and the inbox keeps its B-tree on expires_at (SQLite has no BRIN).
SELECT 1;
