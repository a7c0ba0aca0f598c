package postgres

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// lockSeed is the seed of hashtextextended for the partitioned layout's
// per-record advisory locks (a namespace of their own).
const lockSeed = "7301"

// keySeed is the same for the idempotency keys' per-record locks.
const keySeed = "7302"

// eventSeed is the same for the outbox's per-event locks.
const eventSeed = "7303"

// partitions returns the partitioned layout's statements (see
// sqlset.Partitions). Every identifier comes from the validated names; the
// functions build their DDL with format('%I'), so no value reaches SQL
// text.
func partitions(n store.Names) *sqlset.Partitions {
	s := `"` + n.Schema + `"`
	lit := `'` + n.Schema + `'` // a plain identifier (store.Names validates it): safe as a literal
	inbox, effects := s+`.inbox`, s+`.effects`
	fn := func(name, params, returns, body string) string {
		// force_generic_plan: a statement on a partitioned table costs
		// milliseconds to plan (every partition's indexes), and PL/pgSQL's
		// default re-plans it on every call while a custom plan looks no
		// dearer than the generic one; the generic plan probes every
		// partition the same way.
		return `CREATE OR REPLACE FUNCTION ` + s + `.` + name + `(` + params + `) RETURNS ` + returns +
			` LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $fn$
` + body + `
$fn$;
`
	}
	lock := func(key string) string {
		return `PERFORM pg_advisory_xact_lock(hashtextextended(` + key + `, ` + lockSeed + `));`
	}
	inboxLock := lock(`p_consumer || chr(1) || p_id`)
	inboxAbsent := ` WHERE NOT EXISTS (SELECT 1 FROM ` + inbox + ` i WHERE i.consumer = p_consumer AND i.message_id = p_id)`
	inboxInsert := func(name string, strict bool) string {
		raise := ""
		if strict {
			raise = `
  IF n = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'unique_violation',
      MESSAGE = 'duplicate key value violates the partitioned inbox''s key (consumer, message_id)';
  END IF;`
		}
		return fn(name, "p_consumer text, p_id text, p_fp bytea, p_ts bigint, p_expires bigint", "integer", `DECLARE n integer;
BEGIN
  `+inboxLock+`
  INSERT INTO `+inbox+` (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
  SELECT p_consumer, p_id, p_fp, 'completed', p_ts, p_ts, p_expires`+inboxAbsent+`
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;`+raise+`
  RETURN n;
END`)
	}
	// indexIsKey: index x covers exactly the columns p_key, in order.
	indexIsKey := `coalesce((SELECT array_agg(a.attname::text ORDER BY k.o)
	     FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(n, o)
	     JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n) = p_key, false)`
	effectAbsent := ` WHERE NOT EXISTS (SELECT 1 FROM ` + effects + ` e WHERE e.effect_key = p_key)`
	functions := fn("idem_part_convert", "p_table text, p_key text[], p_column text", "void", `DECLARE defs text[]; fdefs text[]; fsigs text[]; col name;
BEGIN
  EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', `+lit+`, p_table);
  -- functions taking or returning the table's row type (a migration's
  -- RETURNS SETOF table) would keep the old table alive: their definitions
  -- are read now, while they still name the table, and replayed on the
  -- partitioned one below
  SELECT coalesce(array_agg(pg_get_functiondef(p.oid)), '{}'), coalesce(array_agg(p.oid::regprocedure::text), '{}')
    INTO fdefs, fsigs
    FROM pg_proc p, pg_class c
   WHERE c.oid = format('%I.%I', `+lit+`, p_table)::regclass
     AND (p.prorettype = c.reltype OR c.reltype = ANY (p.proargtypes));
  FOR i IN 1 .. coalesce(array_length(fsigs, 1), 0) LOOP
    EXECUTE 'DROP FUNCTION ' || fsigs[i];
  END LOOP;
  -- the table's other indexes, recreated on the partitioned table below;
  -- the primary key, and a unique index on exactly the record's key (the
  -- outbox's (source, event_id)), become the new primary key
  SELECT coalesce(array_agg(pg_get_indexdef(x.indexrelid)), '{}') INTO defs
    FROM pg_index x
   WHERE x.indrelid = format('%I.%I', `+lit+`, p_table)::regclass AND NOT x.indisprimary
     AND NOT (x.indisunique AND `+indexIsKey+`);
  IF EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = format('%I.%I', `+lit+`, p_table)::regclass
             AND x.indisunique AND NOT x.indisprimary AND NOT `+indexIsKey+`) THEN
    RAISE EXCEPTION 'idem: table %.% has a unique index besides its key: it cannot be partitioned', `+lit+`, p_table;
  END IF;
  EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', `+lit+`, p_table, p_table || '_unpartitioned');
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY, PRIMARY KEY (%s, %I)) PARTITION BY RANGE (%I)',
    `+lit+`, p_table, `+lit+`, p_table || '_unpartitioned',
    (SELECT string_agg(format('%I', k), ', ' ORDER BY o) FROM unnest(p_key) WITH ORDINALITY AS u(k, o)), p_column, p_column);
  EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I DEFAULT', `+lit+`, p_table || '_pdefault', `+lit+`, p_table);
  IF p_table = 'outbox' THEN -- room for HOT claims (migration 0013)
    EXECUTE format('ALTER TABLE %I.%I SET (fillfactor = 50)', `+lit+`, p_table || '_pdefault');
  END IF;
  EXECUTE format('INSERT INTO %I.%I OVERRIDING SYSTEM VALUE SELECT * FROM %I.%I', `+lit+`, p_table, `+lit+`, p_table || '_unpartitioned');
  -- an identity column (the outbox's seq) continues where the old table's
  -- sequence was, past the copied rows: rows deleted before the conversion
  -- (pruned, or deleted on publication) leave their values used
  FOR col IN SELECT a.attname FROM pg_attribute a
              WHERE a.attrelid = format('%I.%I', `+lit+`, p_table)::regclass AND a.attidentity <> '' AND NOT a.attisdropped LOOP
    EXECUTE format('SELECT setval(pg_get_serial_sequence(%L, %L), greatest(coalesce((SELECT max(%I) FROM %I.%I), 0) + 1,
        (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s)), false)',
      format('%I.%I', `+lit+`, p_table), col, col, `+lit+`, p_table,
      pg_get_serial_sequence(format('%I.%I', `+lit+`, p_table || '_unpartitioned'), col));
  END LOOP;
  EXECUTE format('DROP TABLE %I.%I', `+lit+`, p_table || '_unpartitioned');
  FOR i IN 1 .. coalesce(array_length(defs, 1), 0) LOOP
    EXECUTE defs[i]; -- "CREATE INDEX name ON schema.table …": the table's name is the partitioned one's now
  END LOOP;
  FOR i IN 1 .. coalesce(array_length(fdefs, 1), 0) LOOP
    EXECUTE fdefs[i];
  END LOOP;
END`) + fn("idem_part_add", "p_table text, p_name text, p_lo bigint, p_hi bigint, p_lock_timeout text, p_column text", "boolean", `BEGIN
  IF to_regclass(format('%I.%I', `+lit+`, p_name)) IS NOT NULL THEN
    RETURN false;
  END IF;
  PERFORM set_config('lock_timeout', p_lock_timeout, true);
  -- no insert may reach the default partition while its rows of this range move
  EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', `+lit+`, p_table || '_pdefault');
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', `+lit+`, p_name, `+lit+`, p_table);
  IF p_table = 'outbox' THEN -- room for HOT claims (migration 0013)
    EXECUTE format('ALTER TABLE %I.%I SET (fillfactor = 50)', `+lit+`, p_name);
  END IF;
  EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I CHECK (%I >= %s AND %I < %s)',
    `+lit+`, p_name, p_name || '_range', p_column, p_lo, p_column, p_hi);
  EXECUTE format('INSERT INTO %I.%I SELECT * FROM %I.%I WHERE %I >= $1 AND %I < $2',
    `+lit+`, p_name, `+lit+`, p_table || '_pdefault', p_column, p_column) USING p_lo, p_hi;
  EXECUTE format('DELETE FROM %I.%I WHERE %I >= $1 AND %I < $2', `+lit+`, p_table || '_pdefault', p_column, p_column) USING p_lo, p_hi;
  EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%s) TO (%s)',
    `+lit+`, p_table, `+lit+`, p_name, p_lo, p_hi);
  -- the CHECK let ATTACH skip scanning the partition; the bound now says the same
  EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', `+lit+`, p_name, p_name || '_range');
  RETURN true;
END`) + fn("idem_part_drop", "p_table text, p_names text[], p_lock_timeout text", "void", `BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout, true);
  -- one transaction for all of them: the table's exclusive lock is taken once
  FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
    EXECUTE format('ALTER TABLE %I.%I DETACH PARTITION %I.%I', `+lit+`, p_table, `+lit+`, p_names[i]);
    EXECUTE format('DROP TABLE %I.%I', `+lit+`, p_names[i]);
  END LOOP;
END`) + fn("outbox_partition_drop", "p_names text[], p_cutoff bigint, p_lock_timeout text", "text[]", `DECLARE dropped text[] := '{}'; busy boolean;
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout, true);
  -- the outbox to ourselves first (as DETACH would take it anyway): no row
  -- of these partitions changes between the check and the drop
  EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', `+lit+`, 'outbox');
  FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
    -- a partition goes only when every event in it is published and has
    -- been for the retention: pending and parked events are never dropped
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %1$I.%2$I WHERE state = ''pending'')
                        OR EXISTS (SELECT 1 FROM %1$I.%2$I WHERE state = ''failed'')
                        OR EXISTS (SELECT 1 FROM %1$I.%2$I WHERE state = ''completed'' AND published_at >= $1)',
      `+lit+`, p_names[i]) INTO busy USING p_cutoff;
    CONTINUE WHEN busy;
    EXECUTE format('ALTER TABLE %I.%I DETACH PARTITION %I.%I', `+lit+`, 'outbox', `+lit+`, p_names[i]);
    EXECUTE format('DROP TABLE %I.%I', `+lit+`, p_names[i]);
    dropped := dropped || p_names[i];
  END LOOP;
  RETURN dropped;
END`) + fn("inbox_partition_keeps", "p_name text, p_consumers text[], p_cutoffs bigint[]", "boolean", `DECLARE found boolean;
BEGIN
  EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I p JOIN unnest($1, $2) AS k(consumer, cutoff)
                  ON p.consumer = k.consumer AND p.received_at >= k.cutoff)', `+lit+`, p_name)
    INTO found USING p_consumers, p_cutoffs;
  RETURN found;
END`)
	inserts := fn("inbox_claim", "p_consumer text, p_id text, p_fp bytea, p_lease bigint, p_received bigint, p_expires bigint", "integer", `DECLARE n integer;
BEGIN
  `+inboxLock+`
  INSERT INTO `+inbox+` (consumer, message_id, fingerprint, state, token, attempts, lease_until, received_at, expires_at)
  SELECT p_consumer, p_id, p_fp, 'in_progress', 1, 1, p_lease, p_received, p_expires`+inboxAbsent+`
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END`) + inboxInsert("inbox_insert", false) + inboxInsert("inbox_insert_strict", true) +
		fn("inbox_batch_insert", "p_consumer text, p_ts bigint, p_expires bigint, p_ids text[], p_fps bytea[]", "SETOF text", `BEGIN
  -- one lock per distinct message, in text order, so two batches never deadlock
  PERFORM pg_advisory_xact_lock(hashtextextended(p_consumer || chr(1) || x.id, `+lockSeed+`))
    FROM (SELECT DISTINCT u AS id FROM unnest(p_ids) AS u ORDER BY 1) x;
  RETURN QUERY
  INSERT INTO `+inbox+` AS t (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
  SELECT p_consumer, u.id, u.fp, 'completed', p_ts, p_ts, p_expires
    FROM unnest(p_ids, p_fps) WITH ORDINALITY AS u(id, fp, ord)
   -- OFFSET 0 keeps the probe a per-row index descent: unnest's estimate
   -- (100 rows) would otherwise make an anti join scanning every partition
   WHERE NOT EXISTS (SELECT 1 FROM `+inbox+` i WHERE i.consumer = p_consumer AND i.message_id = u.id OFFSET 0)
   ORDER BY u.ord
  ON CONFLICT DO NOTHING
  RETURNING t.message_id;
END`) + fn("effects_schedule", "p_key text, p_kind text, p_payload bytea, p_fp bytea, p_next bigint, p_now bigint, p_tp text, p_ts text", "SETOF "+effects, `BEGIN
  `+lock(`p_key`)+`
  RETURN QUERY
  INSERT INTO `+effects+` (effect_key, kind, payload, fingerprint, state, next_attempt_at, created_at, updated_at, traceparent, tracestate)
  SELECT p_key, p_kind, p_payload, p_fp, 'pending', p_next, p_now, p_now, p_tp, p_ts`+effectAbsent+`
  ON CONFLICT DO NOTHING
  RETURNING *;
END`) + fn("effects_insert", "p_key text, p_fp bytea, p_lease bigint, p_now bigint, p_payload bytea", "SETOF "+effects, `BEGIN
  `+lock(`p_key`)+`
  RETURN QUERY
  INSERT INTO `+effects+` (effect_key, kind, payload, fingerprint, state, attempts, token, lease_until, next_attempt_at, created_at, updated_at)
  SELECT p_key, '', p_payload, p_fp, 'in_progress', 1, 1, p_lease, p_lease, p_now, p_now`+effectAbsent+`
  ON CONFLICT DO NOTHING
  RETURNING *;
END`)
	keys := s + `.idempotency_keys`
	keyLock := `PERFORM pg_advisory_xact_lock(hashtextextended(p_tenant || chr(1) || p_op || chr(1) || p_key, ` + keySeed + `));`
	keyAbsent := ` WHERE NOT EXISTS (SELECT 1 FROM ` + keys + ` k WHERE k.tenant = p_tenant AND k.operation = p_op AND k.idem_key = p_key)`
	keyInsert := `INSERT INTO ` + keys + ` (tenant, operation, idem_key, fingerprint, state, token, created_at, locked_until, expires_at)
  SELECT p_tenant, p_op, p_key, p_fp, 'in_progress', p_created, p_created, p_locked, p_expires` + keyAbsent
	const keyParams = "p_tenant text, p_op text, p_key text, p_fp bytea, p_created bigint, p_locked bigint, p_expires bigint"
	dupKey := `
    RAISE EXCEPTION USING ERRCODE = 'unique_violation',
      MESSAGE = 'duplicate key value violates the partitioned idempotency keys'' key (tenant, operation, idem_key)';`
	inserts += fn("keys_insert", keyParams, "SETOF bigint", `BEGIN
  `+keyLock+`
  RETURN QUERY `+keyInsert+`
  ON CONFLICT DO NOTHING RETURNING token;
END`) + fn("keys_insert_locked", keyParams+", p_lock_timeout text, p_strict boolean", "SETOF bigint", `DECLARE t bigint;
BEGIN
  -- as the plain layout's InsertLocked: bound the waits by p_lock_timeout,
  -- and put the transaction's own value back once the record is ours
  PERFORM set_config('idem.prev_lock_timeout', current_setting('lock_timeout'), true);
  PERFORM set_config('lock_timeout', p_lock_timeout, true);
  `+keyLock+`
  `+keyInsert+`
  ON CONFLICT DO NOTHING RETURNING token INTO t;
  IF t IS NULL THEN
    IF p_strict THEN`+dupKey+`
    END IF;
    RETURN;
  END IF;
  PERFORM set_config('lock_timeout', current_setting('idem.prev_lock_timeout'), true);
  RETURN NEXT t;
END`) + fn("keys_insert_completed", "p_tenant text, p_op text, p_key text, p_fp bytea, p_status integer, p_headers text, p_body bytea, p_omitted integer, p_rtype text, p_rid text, p_created bigint, p_completed bigint, p_expires bigint", "void", `DECLARE n integer;
BEGIN
  `+keyLock+`
  INSERT INTO `+keys+` (tenant, operation, idem_key, fingerprint, state, token, status, headers, body,
      body_omitted, resource_type, resource_id, created_at, locked_until, completed_at, expires_at)
  SELECT p_tenant, p_op, p_key, p_fp, 'completed', p_created, p_status, p_headers, p_body, p_omitted, p_rtype, p_rid,
      p_created, 0, p_completed, p_expires`+keyAbsent+`
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n = 0 THEN`+dupKey+`
  END IF;
END`)
	outbox := s + `.outbox`
	// outbox_enqueue is sqlset.Outbox.Enqueue's body as a function: the
	// ordering keys' locks as in the plain layout, then a lock per distinct
	// event (sorted, so two enqueuers never deadlock on them), the
	// coalesced notify, and an insert, in argument order, of each event
	// that no partition holds. The events of one call share their
	// created_at, so the primary key (source, event_id, created_at) refuses
	// a second occurrence of one event within the call.
	inserts += fn("outbox_enqueue", `p_source text[], p_id text[], p_type text[], p_subject text[], p_ce text[], p_time bigint[],
  p_dct text[], p_okey text[], p_headers text[], p_payload bytea[], p_created bigint, p_class int4, p_lock_keys boolean,
  p_channel text, p_notify boolean, p_tp text[], p_ts text[]`, "TABLE(r_source text, r_event_id text, r_seq bigint)", `BEGIN
  IF p_lock_keys THEN
    PERFORM pg_advisory_xact_lock(p_class, h)
       FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest(p_okey) AS u(k) WHERE k <> '' ORDER BY 1) l;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended(x.src || chr(1) || x.id, `+eventSeed+`))
     FROM (SELECT DISTINCT u.src, u.id FROM unnest(p_source, p_id) AS u(src, id) ORDER BY 1, 2) x;
  IF p_notify THEN
    PERFORM pg_notify(p_channel, '');
  END IF;
  RETURN QUERY
  INSERT INTO `+outbox+` AS t (`+outboxCols+`)
  SELECT e.src, e.id, e.typ, e.subj, e.ce, e.tm, e.dct, e.okey, e.hdr, e.pl, p_created, e.tp, e.ts
    FROM unnest(p_source, p_id, p_type, p_subject, p_ce, p_time, p_dct, p_okey, p_headers, p_payload, p_tp, p_ts)
         WITH ORDINALITY AS e(src, id, typ, subj, ce, tm, dct, okey, hdr, pl, tp, ts, ord)
   -- OFFSET 0: a per-row index descent, never an anti join scanning every
   -- partition (unnest's estimate is 100 rows)
   WHERE NOT EXISTS (SELECT 1 FROM `+outbox+` o WHERE o.source = e.src AND o.event_id = e.id OFFSET 0)
   ORDER BY e.ord
  ON CONFLICT DO NOTHING
  RETURNING t.source, t.event_id, t.seq;
END`)
	return &sqlset.Partitions{
		Tables: []sqlset.PartitionedTable{
			{Name: "inbox", Key: []string{"consumer", "message_id"}, Column: "expires_at"},
			{Name: "idempotency_keys", Key: []string{"tenant", "operation", "idem_key"}, Column: "expires_at"},
			{Name: "outbox", Key: []string{"source", "event_id"}, Column: "created_at"},
			{Name: "effects", Key: []string{"effect_key"}, Column: "expires_at"},
		},
		Functions: functions,
		Inserts:   inserts,
		Convert:   `SELECT ` + s + `.idem_part_convert($1::text, $2::text[], $3::text)`,
		Converted: `SELECT coalesce((SELECT c.relkind = 'p' FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
WHERE ns.nspname = ` + lit + ` AND c.relname = $1::text), false)`,
		Add: `SELECT ` + s + `.idem_part_add($1::text, $2::text, $3::bigint, $4::bigint, $5::text, $6::text)`,
		List: `SELECT c.relname,
       coalesce((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?[0-9]+)''?\)'))[1]::bigint, 0),
       coalesce((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(-?[0-9]+)''?\)'))[1]::bigint, 0),
       pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT',
       c.reltuples::bigint
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = format('%I.%I', ` + lit + `, $1::text)::regclass
 ORDER BY 2`,
		Keeps:         `SELECT ` + s + `.inbox_partition_keeps($1::text, $2::text[], $3::bigint[])`,
		Drop:          `SELECT ` + s + `.idem_part_drop($1::text, $2::text[], $3::text)`,
		DropPublished: `SELECT ` + s + `.outbox_partition_drop($1::text[], $2::bigint, $3::text)`,
	}
}

// partitionedInbox replaces the inbox's inserts with the partitioned
// layout's functions (see sqlset.Partitions); every other statement of
// base works on the partitioned table as it is.
func partitionedInbox(n store.Names, base sqlset.Inbox) sqlset.Inbox {
	s := `"` + n.Schema + `"`
	base.Insert = `SELECT 1 FROM ` + s + `.inbox_insert($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint) AS r(n) WHERE r.n = 1`
	base.InsertStrict = `SELECT 1 FROM ` + s + `.inbox_insert_strict($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint)`
	base.Claim = `SELECT 1 FROM ` + s + `.inbox_claim($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint, $6::bigint) AS r(n) WHERE r.n = 1`
	base.BatchInsert = func(k int) string {
		ids, fps := make([]string, k), make([]string, k)
		for i := range k {
			ids[i] = "$" + strconv.Itoa(4+2*i) + "::text"
			fps[i] = "$" + strconv.Itoa(5+2*i) + "::bytea"
		}
		return `SELECT m FROM ` + s + `.inbox_batch_insert($1::text, $2::bigint, $3::bigint, ARRAY[` +
			strings.Join(ids, ",") + `]::text[], ARRAY[` + strings.Join(fps, ",") + `]::bytea[]) AS m`
	}
	// A strict insert on the partitioned table would not refuse a message
	// recorded with another expiry: the layout's function decides.
	base.BatchInsertStrict = nil
	base.BatchStrictSavepoint, base.BatchStrictRelease, base.BatchStrictRollback = "", "", ""
	return base
}

// partitionedEffects replaces the ledger's inserts with the partitioned
// layout's functions (same arguments and returned columns).
func partitionedEffects(n store.Names, base sqlset.Effects) sqlset.Effects {
	s := `"` + n.Schema + `"`
	base.Schedule = `SELECT ` + effectCols + ` FROM ` + s + `.effects_schedule($1::text, $2::text, $3::bytea, $4::bytea, $5::bigint, $6::bigint, $7::text, $8::text)`
	base.Insert = `SELECT ` + effectCols + ` FROM ` + s + `.effects_insert($1::text, $2::bytea, $3::bigint, $4::bigint, $5::bytea)`
	return base
}

// partitionedKeys replaces the idempotency keys' inserts with the
// partitioned layout's functions (same arguments and results).
func partitionedKeys(n store.Names, base sqlset.HTTPKeys) sqlset.HTTPKeys {
	s := `"` + n.Schema + `"`
	const args = `$1::text, $2::text, $3::text, $4::bytea, $5::bigint, $6::bigint, $7::bigint`
	base.Insert = `SELECT t, '' FROM ` + s + `.keys_insert(` + args + `) AS t`
	base.InsertLocked = `SELECT t, '' FROM ` + s + `.keys_insert_locked(` + args + `, $8::text, false) AS t`
	base.InsertStrict = `SELECT t, '' FROM ` + s + `.keys_insert_locked(` + args + `, $8::text, true) AS t`
	base.InsertCompleted = `SELECT ` + s + `.keys_insert_completed($1::text, $2::text, $3::text, $4::bytea, $5::integer, $6::text, $7::bytea, $8::integer,
$9::text, $10::text, $11::bigint, $12::bigint, $13::bigint)`
	return base
}

// partitionedOutbox replaces the outbox's deciding inserts with the
// partitioned layout's outbox_enqueue (same arguments and returned
// columns), and claims rows by seq instead of ctid: a ctid names a row
// only within one partition, so a claim by ctid could take another
// partition's row (one an ordering key still blocks).
func partitionedOutbox(n store.Names, base sqlset.Outbox) sqlset.Outbox {
	s := `"` + n.Schema + `"`
	base.EnqueueOne = "" // its dedup is outbox_enqueue's
	base.Enqueue = `SELECT r_source, r_event_id, r_seq FROM ` + s + `.outbox_enqueue($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
$6::bigint[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::bigint, $12::int4, $13::bool,
$14::text, $15::bool, $16::text[], $17::text[])`
	// The rows of one Insert share their created_at (outbox.Outbox passes
	// one time for a call): the call takes the least of them.
	base.Insert = func(k int) string {
		types := []string{"text", "text", "text", "text", "text", "bigint", "text", "text", "text", "bytea", "bigint", "text", "text"}
		cols := make([]string, len(types))
		for j, typ := range types {
			elems := make([]string, k)
			for i := range k {
				elems[i] = "$" + strconv.Itoa(i*len(types)+j+1)
			}
			cols[j] = "ARRAY[" + strings.Join(elems, ",") + "]::" + typ + "[]"
		}
		created := make([]string, k)
		for i := range k {
			created[i] = "$" + strconv.Itoa(i*len(types)+11) + "::bigint"
		}
		return `SELECT r_source, r_event_id, r_seq FROM ` + s + `.outbox_enqueue(` + strings.Join(cols[:10], ", ") +
			`, least(` + strings.Join(created, ", ") + `), 0, false, '', false, ` + cols[11] + `, ` + cols[12] + `)`
	}
	base.Claim = mustReplace(mustReplace(base.Claim, "SELECT o.ctid FROM", "SELECT o.seq FROM"), "WHERE ctid = ANY(ARRAY(", "WHERE seq = ANY(ARRAY(")
	// The claim transaction's statements (mark, claim) plan against every
	// partition: generic plans, planned once per connection, not per round.
	base.LockClaim = mustReplace(base.LockClaim, "set_config('synchronous_commit', 'off', true)",
		"set_config('synchronous_commit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)")
	return base
}

// mustReplace replaces the one occurrence of old in s; a statement without
// it is a programming error caught by the first test of the layout.
func mustReplace(s, old, new string) string {
	if strings.Count(s, old) != 1 {
		panic("postgres: partitioned layout: statement does not contain " + strconv.Quote(old) + " once: " + s)
	}
	return strings.Replace(s, old, new, 1)
}
