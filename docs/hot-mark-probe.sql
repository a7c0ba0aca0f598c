-- What a mark that touches no indexed column would save the relay (issue 32,
-- item 2), measured on the relay's own statements before it is built. On a
-- scratch database migrated by idem (schema idem; pg_walinspect installed in
-- public), :rounds rounds of :n keyless events: enqueue (one INSERT,
-- synchronous commit), claim and mark (each committed with
-- synchronous_commit off, as the relay does), over a retained history of
-- 100,000 published rows. Prints the milliseconds per round and the WAL
-- bytes and heap/btree records per event of each step.
--
--   :hot = 0  idem's schema: the claim finds pending rows through
--             outbox_pending_idx (seq) WHERE state = 'pending'.
--   :hot = 1  the same table with no index that refers to state (a full
--             index on seq, parked rows and the blocking index keyed on a
--             parked flag), and a claim that starts at a low-water seq: the
--             seq after the last batch. That low-water mark is an upper
--             bound of the gain, not a design: it ignores rows of
--             transactions still open below it, which a relay must wait for
--             (see BENCHMARKS.md). IT CHANGES THE SCHEMA: use a scratch
--             database for each value.
--
--   createdb p0 && idem migrate up --db postgres://localhost/p0 && psql -d p0 -c 'create extension pg_walinspect'
--   psql -d p0 -v hot=0 -v n=512 -v rounds=40 -f docs/hot-mark-probe.sql
--   (and the same with p1 and -v hot=1)
\set ON_ERROR_STOP on
SET search_path = idem;
\if :hot
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS parked boolean NOT NULL DEFAULT false;
DROP INDEX IF EXISTS outbox_pending_idx, outbox_completed_idx, outbox_failed_idx, outbox_block_idx;
CREATE INDEX IF NOT EXISTS outbox_seq_idx ON outbox (seq);
CREATE INDEX IF NOT EXISTS outbox_parked_idx ON outbox (seq) WHERE parked;
CREATE INDEX IF NOT EXISTS outbox_keyblock_idx ON outbox (ordering_key, seq)
    WHERE ordering_key <> '' AND (parked OR key_claim_until > 0 OR next_attempt_at > 0);
\endif
TRUNCATE outbox;
INSERT INTO outbox (source, event_id, type, subject, time, payload, created_at, state, published_at)
SELECT '/old', 'o' || g, 'probe.created', 'probe', 0, '\x7b7d'::bytea, 0, 'completed', 1 FROM generate_series(1, 100000) g;
VACUUM ANALYZE outbox;
CHECKPOINT;
SELECT set_config('probe.hot', :'hot', false), set_config('probe.n', :'n', false), set_config('probe.rounds', :'rounds', false) \gset
CREATE TEMP TABLE res (step text, ms float8, l0 pg_lsn, l1 pg_lsn);
DO $$
DECLARE
  hot boolean := current_setting('probe.hot') = '1'; n int := current_setting('probe.n')::int; t0 timestamptz; l0 pg_lsn; lw bigint := 0; seqs bigint[];
BEGIN
  FOR r IN 1..current_setting('probe.rounds')::int LOOP
    t0 := clock_timestamp(); l0 := pg_current_wal_insert_lsn();
    INSERT INTO outbox (source, event_id, type, subject, time, payload, created_at)
    SELECT '/probe', 'e' || r || '-' || g, 'probe.created', 'probe', 0, '\x7b7d'::bytea, 0 FROM generate_series(1, n) g;
    COMMIT;
    INSERT INTO res VALUES ('enqueue', extract(epoch from clock_timestamp() - t0) * 1000, l0, pg_current_wal_insert_lsn());
    COMMIT;
    PERFORM set_config('synchronous_commit', 'off', true);
    t0 := clock_timestamp(); l0 := pg_current_wal_insert_lsn();
    IF hot THEN
      IF seqs IS NOT NULL THEN lw := seqs[array_length(seqs, 1)] + 1; END IF;
      WITH c AS (UPDATE outbox SET claimed_by = 'relay', claim_until = 100
        WHERE ctid = ANY(ARRAY(SELECT o.ctid FROM outbox o WHERE o.seq >= lw AND o.state = 'pending' AND o.next_attempt_at <= 1 AND o.claim_until <= 1 ORDER BY o.seq LIMIT n))
        RETURNING seq) SELECT array_agg(seq ORDER BY seq) INTO seqs FROM c;
    ELSE
      WITH c AS (UPDATE outbox SET claimed_by = 'relay', claim_until = 100
        WHERE ctid = ANY(ARRAY(SELECT o.ctid FROM outbox o WHERE o.state = 'pending' AND o.next_attempt_at <= 1 AND o.claim_until <= 1 ORDER BY o.seq LIMIT n))
        RETURNING seq) SELECT array_agg(seq ORDER BY seq) INTO seqs FROM c;
    END IF;
    COMMIT;
    INSERT INTO res VALUES ('claim', extract(epoch from clock_timestamp() - t0) * 1000, l0, pg_current_wal_insert_lsn());
    COMMIT;
    PERFORM set_config('synchronous_commit', 'off', true);
    t0 := clock_timestamp(); l0 := pg_current_wal_insert_lsn();
    UPDATE outbox SET state = 'completed', published_at = 1, claimed_by = '', claim_until = 0, last_error = ''
      WHERE seq = ANY(seqs) AND state = 'pending';
    COMMIT;
    INSERT INTO res VALUES ('mark', extract(epoch from clock_timestamp() - t0) * 1000, l0, pg_current_wal_insert_lsn());
    COMMIT;
  END LOOP;
END $$;
SELECT pg_switch_wal() \gset
SELECT step, round(avg(ms)::numeric, 2) AS ms_per_round,
       round(sum(l1 - l0) / (count(*) * :n), 1) AS wal_bytes_per_event,
       round(sum((SELECT count(*) FROM public.pg_get_wal_records_info(l0, l1) w WHERE w.resource_manager IN ('Heap', 'Heap2', 'Btree')))::numeric / (count(*) * :n), 2) AS heap_index_records_per_event
FROM res GROUP BY step ORDER BY step;
