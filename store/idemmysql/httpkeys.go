package idemmysql

import "github.com/idemkit/idem/internal/sqlset"

// httpKeys has no InsertLocked, InsertStrict or TakeOverLocked (see
// Statements' NotNeeded).
func httpKeys(t func(string) string) sqlset.HTTPKeys {
	k := t("idempotency_keys")
	const (
		pk   = `tenant = $1 AND operation = $2 AND idem_key = $3`
		cols = `fingerprint, state, token, status, headers, body, body_omitted, resource_type, resource_id, created_at, locked_until, completed_at, expires_at`
	)
	token := `/*idem:need*/ SELECT token, '' FROM ` + k + ` WHERE ` + pk
	return sqlset.HTTPKeys{
		// One statement: insert the claim, or lock the existing row
		// exclusively and change nothing (see the fresh directive and
		// Inbox.Claim); a row it inserts has token $5 (see sqlset), emitted
		// without reading it back.
		Insert: `/*idem:fresh emit:$5,''*/ INSERT INTO ` + k + ` (tenant, operation, idem_key, fingerprint, state, token, created_at, locked_until, expires_at)
VALUES ($1, $2, $3, $4, 'in_progress', $5, $5, $6, $7)
ON DUPLICATE KEY UPDATE token = IF(LAST_INSERT_ID(token) IS NULL, token, token)`,
		// A locking read: after a conflict it sees the committed row
		// whatever the caller's snapshot.
		Load: `SELECT ` + cols + ` FROM ` + k + ` WHERE ` + pk + ` LOCK IN SHARE MODE`,
		InsertCompleted: `INSERT INTO ` + k + ` (tenant, operation, idem_key, fingerprint, state, token, status, headers, body,
body_omitted, resource_type, resource_id, created_at, locked_until, completed_at, expires_at)
VALUES ($1, $2, $3, $4, 'completed', $11, $5, $6, $7, $8, $9, $10, $11, 0, $12, $13)`,
		TakeOver: `UPDATE ` + k + ` SET fingerprint = $5, state = 'in_progress', token = token + 1, status = 0,
headers = '{}', body = '', body_omitted = 0, resource_type = '', resource_id = '',
created_at = $6, locked_until = $7, completed_at = 0, expires_at = $8
WHERE ` + pk + ` AND token = $4 AND (expires_at <= $9 OR (state = 'in_progress' AND locked_until <= $9 AND $10 = 1));
` + token,
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
		Expire:      `DELETE FROM ` + k + ` WHERE expires_at < $1 LIMIT $2`,
		Counts:      `SELECT state, count(*) FROM ` + k + ` GROUP BY state`,
	}
}
