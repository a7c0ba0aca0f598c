-- The pipelined HTTP path's first step in ONE statement (issue 13):
-- idemhttp's transactional middleware on pgx takes the key's session
-- advisory lock and reads its record, releasing the lock at once when a
-- record exists (so a replay is one statement and holds nothing), keeping
-- it when there is none (the caller executes, inserts the completed record,
-- commits, and only then unlocks).
--
-- A function because the read must see what the lock's previous holder
-- committed before releasing it: a statement's snapshot is taken when it
-- starts, before a lock it waits for is granted, but every query of a
-- VOLATILE plpgsql function takes a fresh snapshot under READ COMMITTED, so
-- the RETURN QUERY below starts after the grant. The wait, only when the
-- lock is held by another session, is bounded by p_lock_timeout (text,
-- e.g. '500ms'; lock_timeout local to the caller's implicit transaction).
-- If the read fails after the lock was taken (any error, a statement_timeout
-- or a cancel included: OTHERS does not cover query_canceled, so it is
-- named), the lock is released before the error propagates, so a failed
-- call never leaves a session lock held.
CREATE OR REPLACE FUNCTION {{t}}idem_http_lock_load(p_tenant text, p_operation text, p_key text, p_lock bigint, p_lock_timeout text)
RETURNS SETOF {{t}}idempotency_keys
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT pg_try_advisory_lock(p_lock) THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);
        PERFORM pg_advisory_lock(p_lock);
    END IF;
    BEGIN
        RETURN QUERY SELECT * FROM {{t}}idempotency_keys
            WHERE tenant = p_tenant AND operation = p_operation AND idem_key = p_key;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(p_lock);
        RAISE;
    END;
    IF FOUND THEN
        PERFORM pg_advisory_unlock(p_lock);
    END IF;
END
$$;
