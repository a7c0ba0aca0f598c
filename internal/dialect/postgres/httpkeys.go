package postgres

import "github.com/idemkit/idem/internal/sqlset"

func httpKeys(t func(string) string) sqlset.HTTPKeys {
	k := t("idempotency_keys")
	const (
		pk   = `tenant = $1 AND operation = $2 AND idem_key = $3`
		cols = `fingerprint, state, token, status, headers, body, body_omitted, resource_type, resource_id, created_at, locked_until, completed_at, expires_at`
		// restore puts back the lock_timeout InsertLocked saved.
		restore = `, set_config('lock_timeout', current_setting('idem.prev_lock_timeout'), true)`
		// lockedWith, in one round trip: remember the transaction's
		// lock_timeout, bound the wait on the primary key by $8, and
		// (restore, in RETURNING) put the old value back for the
		// handler's own statements once the row is ours.
		lockedWith = `WITH lt AS (
  SELECT set_config('idem.prev_lock_timeout', current_setting('lock_timeout'), true) AS prev,
         set_config('lock_timeout', $8, true) AS cur
)
`
	)
	lockedInsert := lockedWith + `INSERT INTO ` + k + ` (tenant, operation, idem_key, fingerprint, state, token, created_at, locked_until, expires_at)
SELECT $1::text, $2::text, $3::text, $4::bytea, 'in_progress', $5::bigint, $5::bigint, $6::bigint, $7::bigint FROM lt
`
	takeOver := `UPDATE ` + k + ` SET fingerprint = $5, state = 'in_progress', token = token + 1, status = 0,
headers = '{}', body = ''::bytea, body_omitted = 0, resource_type = '', resource_id = '',
created_at = $6, locked_until = $7, completed_at = 0, expires_at = $8
WHERE ` + pk + ` AND token = $4 AND (expires_at <= $9 OR (state = 'in_progress' AND locked_until <= $9 AND $10 = 1))
RETURNING token`
	return sqlset.HTTPKeys{
		Insert: `INSERT INTO ` + k + ` (tenant, operation, idem_key, fingerprint, state, token, created_at, locked_until, expires_at)
VALUES ($1, $2, $3, $4, 'in_progress', $5, $5, $6, $7)
ON CONFLICT (tenant, operation, idem_key) DO NOTHING
RETURNING token, ''`,
		InsertLocked: lockedInsert + `ON CONFLICT (tenant, operation, idem_key) DO NOTHING
RETURNING token` + restore,
		InsertStrict: lockedInsert + `RETURNING token` + restore,
		Load:         `SELECT ` + cols + ` FROM ` + k + ` WHERE ` + pk,
		// One statement: migration 0014's function (0012's, reading first)
		// returns an existing record without locking; otherwise it takes the lock
		// (waiting, only when contended, at most $5) and then reads the
		// record in a query of its own, whose snapshot starts after the
		// grant; it releases the lock when there is a record.
		LockKey: `SELECT ` + cols + ` FROM ` + t("idem_http_lock_load") + `($1::text, $2::text, $3::text, $4::bigint, $5::text)`,
		Unlock:  `SELECT pg_advisory_unlock($1::bigint)`,
		InsertCompleted: `INSERT INTO ` + k + ` (tenant, operation, idem_key, fingerprint, state, token, status, headers, body,
body_omitted, resource_type, resource_id, created_at, locked_until, completed_at, expires_at)
VALUES ($1, $2, $3, $4, 'completed', $11, $5, $6, $7, $8, $9, $10, $11, 0, $12, $13)`,
		TakeOver:       takeOver + `, ''`,
		TakeOverLocked: takeOver + restore,
		Hold: `UPDATE ` + k + ` SET state = 'failed', token = token + 1, locked_until = 0
WHERE ` + pk + ` AND token = $4 AND state = 'in_progress' AND locked_until <= $5 AND expires_at > $5`,
		Complete: `UPDATE ` + k + ` SET state = 'completed', status = $5, headers = $6, body = $7, body_omitted = $8,
resource_type = $9, resource_id = $10, locked_until = 0, completed_at = $11
WHERE ` + pk + ` AND token = $4 AND state = 'in_progress'`,
		Release: `DELETE FROM ` + k + ` WHERE ` + pk + ` AND token = $4 AND state = 'in_progress'`,
		Forget:  `DELETE FROM ` + k + ` WHERE ` + pk + ` AND NOT (state = 'in_progress' AND locked_until > $4)`,
		ListHeld: `SELECT tenant, operation, idem_key, ` + cols + ` FROM ` + k + ` WHERE state = 'failed'
ORDER BY created_at, tenant, operation, idem_key LIMIT $1`,
		ResolveHeld: `UPDATE ` + k + ` SET state = 'completed', token = token + 1, status = $4, headers = $5, body = $6,
body_omitted = 0, locked_until = 0, completed_at = $7 WHERE ` + pk + ` AND state = 'failed'`,
		ReleaseHeld: `DELETE FROM ` + k + ` WHERE ` + pk + ` AND state = 'failed'`,
		// The condition is repeated outside the ctid subquery, so a row
		// changed concurrently is re-checked against its latest version.
		Expire: `DELETE FROM ` + k + ` WHERE ctid IN (SELECT ctid FROM ` + k + ` WHERE expires_at < $1 LIMIT $2) AND expires_at < $1`,
		Counts: `SELECT state, count(*) FROM ` + k + ` GROUP BY state`,
	}
}
