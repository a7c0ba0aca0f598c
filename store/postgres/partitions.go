package postgres

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlset"
)

// lockSeed is the seed of hashtextextended for the partitioned inbox's
// per-message advisory locks (a namespace of their own).
const lockSeed = "7301"

// partitions returns the partitioned layout's statements (see
// sqlset.Partitions). Every identifier comes from the validated names; the
// functions build their DDL with format('%I'), so no value reaches SQL
// text.
func partitions(n store.Names) *sqlset.Partitions {
	s := `"` + n.Schema + `"`
	schemaLit := `'` + n.Schema + `'` // a plain identifier (store.Names validates it): safe as a literal
	inbox := s + `.inbox`
	lock := `PERFORM pg_advisory_xact_lock(hashtextextended(p_consumer || chr(1) || p_id, ` + lockSeed + `));`
	const notExists = ` WHERE NOT EXISTS (SELECT 1 FROM %INBOX% i WHERE i.consumer = p_consumer AND i.message_id = p_id)`
	fn := func(name, params, returns, body string) string {
		return `CREATE OR REPLACE FUNCTION ` + s + `.` + name + `(` + params + `) RETURNS ` + returns +
			` LANGUAGE plpgsql VOLATILE AS $fn$
` + strings.ReplaceAll(body, "%INBOX%", inbox) + `
$fn$;
`
	}
	convert := `LOCK TABLE ` + inbox + ` IN ACCESS EXCLUSIVE MODE;
ALTER TABLE ` + inbox + ` RENAME TO inbox_unpartitioned;
CREATE TABLE ` + inbox + ` (LIKE ` + s + `.inbox_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    PRIMARY KEY (consumer, message_id, expires_at)) PARTITION BY RANGE (expires_at);
CREATE INDEX inbox_part_in_progress_idx ON ` + inbox + ` (consumer, lease_until) WHERE state = 'in_progress';
CREATE TABLE ` + s + `.inbox_pdefault PARTITION OF ` + inbox + ` DEFAULT;
` + fn("inbox_claim", "p_consumer text, p_id text, p_fp bytea, p_lease bigint, p_received bigint, p_expires bigint", "integer", `DECLARE n integer;
BEGIN
  `+lock+`
  INSERT INTO %INBOX% (consumer, message_id, fingerprint, state, token, attempts, lease_until, received_at, expires_at)
  SELECT p_consumer, p_id, p_fp, 'in_progress', 1, 1, p_lease, p_received, p_expires`+notExists+`
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END`) + fn("inbox_insert", "p_consumer text, p_id text, p_fp bytea, p_ts bigint, p_expires bigint", "integer", `DECLARE n integer;
BEGIN
  `+lock+`
  INSERT INTO %INBOX% (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
  SELECT p_consumer, p_id, p_fp, 'completed', p_ts, p_ts, p_expires`+notExists+`
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END`) + fn("inbox_insert_strict", "p_consumer text, p_id text, p_fp bytea, p_ts bigint, p_expires bigint", "integer", `DECLARE n integer;
BEGIN
  `+lock+`
  INSERT INTO %INBOX% (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
  SELECT p_consumer, p_id, p_fp, 'completed', p_ts, p_ts, p_expires`+notExists+`
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'unique_violation',
      MESSAGE = 'duplicate key value violates the partitioned inbox''s key (consumer, message_id)';
  END IF;
  RETURN n;
END`) + fn("inbox_batch_insert", "p_consumer text, p_ts bigint, p_expires bigint, p_ids text[], p_fps bytea[]", "SETOF text", `BEGIN
  -- one lock per distinct message, in text order, so two batches never deadlock
  PERFORM pg_advisory_xact_lock(hashtextextended(p_consumer || chr(1) || x.id, `+lockSeed+`))
    FROM (SELECT DISTINCT u AS id FROM unnest(p_ids) AS u ORDER BY 1) x;
  RETURN QUERY
  INSERT INTO %INBOX% AS t (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
  SELECT p_consumer, u.id, u.fp, 'completed', p_ts, p_ts, p_expires
    FROM unnest(p_ids, p_fps) WITH ORDINALITY AS u(id, fp, ord)
   WHERE NOT EXISTS (SELECT 1 FROM %INBOX% i WHERE i.consumer = p_consumer AND i.message_id = u.id)
   ORDER BY u.ord
  ON CONFLICT DO NOTHING
  RETURNING t.message_id;
END`) + fn("inbox_add_partition", "p_name text, p_lo bigint, p_hi bigint", "boolean", `BEGIN
  IF to_regclass(format('%I.%I', `+schemaLit+`, p_name)) IS NOT NULL THEN
    RETURN false;
  END IF;
  -- no insert may reach the default partition while its rows of this range move
  EXECUTE format('LOCK TABLE %I.inbox_pdefault IN ACCESS EXCLUSIVE MODE', `+schemaLit+`);
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', `+schemaLit+`, p_name, `+schemaLit+`);
  EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I CHECK (expires_at >= %s AND expires_at < %s)',
    `+schemaLit+`, p_name, p_name || '_range', p_lo, p_hi);
  EXECUTE format('INSERT INTO %I.%I SELECT * FROM %I.inbox_pdefault WHERE expires_at >= $1 AND expires_at < $2',
    `+schemaLit+`, p_name, `+schemaLit+`) USING p_lo, p_hi;
  EXECUTE format('DELETE FROM %I.inbox_pdefault WHERE expires_at >= $1 AND expires_at < $2', `+schemaLit+`) USING p_lo, p_hi;
  EXECUTE format('ALTER TABLE %I.inbox ATTACH PARTITION %I.%I FOR VALUES FROM (%s) TO (%s)',
    `+schemaLit+`, `+schemaLit+`, p_name, p_lo, p_hi);
  -- the CHECK let ATTACH skip scanning the partition; the bound now says the same
  EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', `+schemaLit+`, p_name, p_name || '_range');
  RETURN true;
END`) + fn("inbox_partition_keeps", "p_name text, p_consumers text[], p_cutoffs bigint[]", "boolean", `DECLARE found boolean;
BEGIN
  EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I p JOIN unnest($1, $2) AS k(consumer, cutoff)
                  ON p.consumer = k.consumer AND p.received_at >= k.cutoff)', `+schemaLit+`, p_name)
    INTO found USING p_consumers, p_cutoffs;
  RETURN found;
END`) + fn("inbox_drop_partition", "p_name text, p_lock_timeout text", "void", `BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout, true);
  EXECUTE format('ALTER TABLE %I.inbox DETACH PARTITION %I.%I', `+schemaLit+`, `+schemaLit+`, p_name);
  EXECUTE format('DROP TABLE %I.%I', `+schemaLit+`, p_name);
END`) + `INSERT INTO ` + inbox + ` SELECT * FROM ` + s + `.inbox_unpartitioned;
DROP TABLE ` + s + `.inbox_unpartitioned;
`
	return &sqlset.Partitions{
		Convert: convert,
		Converted: `SELECT coalesce((SELECT c.relkind = 'p' FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
WHERE ns.nspname = ` + schemaLit + ` AND c.relname = 'inbox'), false)`,
		Add: `SELECT ` + s + `.inbox_add_partition($1::text, $2::bigint, $3::bigint)`,
		List: `SELECT c.relname,
       coalesce((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(-?[0-9]+)''?\)'))[1]::bigint, 0),
       coalesce((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(-?[0-9]+)''?\)'))[1]::bigint, 0),
       pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT',
       c.reltuples::bigint
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = to_regclass(` + `'"` + n.Schema + `".inbox')
 ORDER BY 2`,
		Keeps: `SELECT ` + s + `.inbox_partition_keeps($1::text, $2::text[], $3::bigint[])`,
		Drop:  `SELECT ` + s + `.inbox_drop_partition($1::text, $2::text)`,
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
	return base
}
