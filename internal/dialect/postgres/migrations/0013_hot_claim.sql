-- A relay's claim as a HOT update (issue 13). A claim writes claimed_by and
-- claim_until on each claimed row; because outbox_block_idx's predicate
-- read claim_until (a claimed row of an ordering key blocks the key's later
-- rows), every claim was a non-HOT update: a new row version on another
-- page plus an entry in every index whose predicate it satisfied, about
-- four WAL records per claimed row.
--
-- The blocking index now reads key_claim_until instead: the claim's lease
-- again, set by the same statements as claim_until on rows that have an
-- ordering key and left at 0 on rows that have none. A keyless row's claim
-- then changes no column any index refers to (the claim does not change
-- state), and PostgreSQL updates it in place on its page when the page has
-- room: one WAL record per row and no index entry. The fillfactor leaves
-- that room: a page is filled to half by inserts, the other half takes the
-- claims' new versions, and pruning reclaims them on a later visit.
ALTER TABLE {{t}}outbox ADD COLUMN key_claim_until bigint NOT NULL DEFAULT 0;
UPDATE {{t}}outbox SET key_claim_until = claim_until WHERE ordering_key <> '' AND claim_until <> 0;
DROP INDEX IF EXISTS {{t}}outbox_block_idx;
CREATE INDEX {{p}}outbox_block_idx ON {{t}}outbox (ordering_key, seq)
    WHERE ordering_key <> '' AND (state = 'failed' OR (state = 'pending' AND (key_claim_until > 0 OR next_attempt_at > 0)));
-- A partitioned outbox (idem migrate partition) has no storage of its own:
-- its partitions take the fillfactor (and new ones get it when created).
DO $$
DECLARE part regclass;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = '{{t}}outbox'::regclass) = 'r' THEN
        ALTER TABLE {{t}}outbox SET (fillfactor = 50);
    ELSE
        FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = '{{t}}outbox'::regclass LOOP
            EXECUTE format('ALTER TABLE %s SET (fillfactor = 50)', part);
        END LOOP;
    END IF;
END $$;
