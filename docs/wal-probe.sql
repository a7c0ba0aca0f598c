-- WAL written per outbox event by the relay's statements, from
-- EXPLAIN (ANALYZE, WAL): enqueue, claim and mark (or delete: rolled back) of :n events, keyless
-- (:keys = 0) or spread over :keys ordering keys. Run on a database migrated
-- by idem (schema idem), after a CHECKPOINT so that full-page images are
-- counted apart ("fpi"):
--
--   psql -d DB -v n=512 -v keys=0 -f docs/wal-probe.sql
--   psql -d DB -v n=512 -v keys=1000 -f docs/wal-probe.sql
--
-- It truncates idem.outbox: use a scratch database.
\set ON_ERROR_STOP on
SET search_path = idem;
TRUNCATE outbox;
CHECKPOINT;
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_sort = off;
\echo enqueue :n events
EXPLAIN (ANALYZE, WAL, COSTS OFF, TIMING OFF, SUMMARY OFF)
INSERT INTO outbox (source, event_id, type, subject, time, payload, created_at, ordering_key)
SELECT '/probe', 'e' || g, 'probe.created', 'probe', 0, '\x7b7d'::bytea, 0,
       CASE WHEN :keys = 0 THEN '' ELSE 'k' || (g % :keys) END
FROM generate_series(1, :n) g;
\echo claim :n events
EXPLAIN (ANALYZE, WAL, COSTS OFF, TIMING OFF, SUMMARY OFF)
UPDATE outbox SET claimed_by = 'relay', claim_until = 100,
       key_claim_until = CASE WHEN ordering_key <> '' THEN 100 ELSE 0 END
WHERE ctid = ANY(ARRAY(
        SELECT o.ctid FROM outbox o
        WHERE o.state = 'pending' AND o.next_attempt_at <= 1 AND o.claim_until <= 1
          AND NOT EXISTS (
                SELECT 1 FROM outbox b
                WHERE b.ordering_key = o.ordering_key AND b.seq < o.seq
                  AND b.ordering_key <> '' AND (b.state = 'failed' OR (b.state = 'pending' AND (b.key_claim_until > 0 OR b.next_attempt_at > 0)))
                  AND (b.state = 'failed' OR b.next_attempt_at > 1 OR b.key_claim_until > 1))
        ORDER BY o.seq LIMIT :n))
  AND state = 'pending' AND next_attempt_at <= 1 AND claim_until <= 1;
\echo delete :n published events instead (RelayConfig.DeletePublished; rolled back)
BEGIN;
EXPLAIN (ANALYZE, WAL, COSTS OFF, TIMING OFF, SUMMARY OFF)
DELETE FROM outbox
WHERE seq = ANY(ARRAY(SELECT seq FROM outbox WHERE state = 'pending' ORDER BY seq LIMIT :n)) AND state = 'pending';
ROLLBACK;
\echo mark :n events published
EXPLAIN (ANALYZE, WAL, COSTS OFF, TIMING OFF, SUMMARY OFF)
UPDATE outbox SET state = 'completed', published_at = 1, claimed_by = '', claim_until = 0, key_claim_until = 0, last_error = ''
WHERE seq = ANY(ARRAY(SELECT seq FROM outbox WHERE state = 'pending' ORDER BY seq LIMIT :n)) AND state = 'pending';
