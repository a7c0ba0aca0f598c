-- Fewer index entries per queued row (issue 13). Every insert, claim and
-- completion of an outbox row writes one entry per index whose predicate it
-- satisfies (a claim or a completion changes indexed columns, so it is never
-- a HOT update): the primary key on seq was one more entry on each of the
-- three and served nothing the partial indexes do not. The relay finds
-- pending rows through outbox_pending_idx, parked rows through
-- outbox_failed_idx, and expired completed rows through outbox_completed_idx
-- (then by ctid); seq stays an identity column, unique by construction.
-- (source, event_id) keeps its unique constraint: it is the dedup.
ALTER TABLE {{t}}outbox DROP CONSTRAINT IF EXISTS outbox_pkey;
CREATE INDEX {{p}}outbox_failed_idx ON {{t}}outbox (seq) WHERE state = 'failed';
-- The inbox's retention scan reads expires_at in ranges: a BRIN index costs
-- an insert nothing (rows are appended roughly in expiry order) where the
-- B-tree cost one more entry per processed message.
DROP INDEX IF EXISTS {{t}}inbox_expires_idx;
CREATE INDEX {{p}}inbox_expires_idx ON {{t}}inbox USING brin (expires_at);
