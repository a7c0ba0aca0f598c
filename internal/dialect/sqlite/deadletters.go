package sqlite

import "github.com/idemkit/idem/internal/sqlset"

func deadLetters(t func(string) string) sqlset.DeadLetters {
	table := t("dead_letters")
	const cols = `id, consumer, source, position, message_id, msg_key, headers, payload, fingerprint,
 error, error_class, attempts, first_failed_at, last_failed_at, state, redriven_by, redriven_at,
 resolved_by, resolved_at, created_at, redrive_reason, revision_id,
 revision_payload, revision_record_expires_at`
	const resolved = `state IN ('redriven', 'discarded') AND resolved_at > 0 AND resolved_at < $1`
	return sqlset.DeadLetters{
		Park: `INSERT INTO ` + table + ` AS dl (consumer, source, position, message_id, msg_key, headers, payload,
 fingerprint, error, error_class, attempts, first_failed_at, last_failed_at, state, created_at)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, 'parked', $12)
 ON CONFLICT (consumer, message_id, fingerprint) WHERE state = 'parked' DO UPDATE SET
 attempts = max(dl.attempts + 1, excluded.attempts),
 error = excluded.error, error_class = excluded.error_class,
 source = excluded.source, position = excluded.position, headers = excluded.headers,
 last_failed_at = excluded.last_failed_at
 RETURNING id`,
		Get: `SELECT ` + cols + ` FROM ` + table + ` WHERE id = $1`,
		List: `SELECT ` + cols + ` FROM ` + table + `
 WHERE ($1 = '' OR consumer = $1) AND ($2 = 0 OR last_failed_at >= $2)
 AND ($3 = 0 OR last_failed_at < $3) AND ($4 = '' OR error_class = $4)
 AND ($5 = '' OR state = $5) AND id > $6
 ORDER BY id LIMIT $7`,
		OfMessage: `SELECT ` + cols + ` FROM ` + table + ` WHERE message_id = $1 ORDER BY id LIMIT $2`,
		ClaimRedrive: `UPDATE ` + table + ` SET state = 'redriven', redriven_by = $2, redriven_at = $3,
 resolved_by = $2, resolved_at = $3, redrive_reason = $4 WHERE id = $1 AND state = 'parked' AND revision_id = '' RETURNING ` + cols,
		Discard: `UPDATE ` + table + ` SET state = 'discarded', resolved_by = $2, resolved_at = $3
 WHERE id = $1 AND state = 'parked'`,
		GetLocked: `SELECT ` + cols + ` FROM ` + table + ` WHERE id = $1`,
		SetRevision: `UPDATE ` + table + ` SET revision_id = $2, revision_payload = $3, revision_record_expires_at = $4
 WHERE id = $1 AND state = 'parked'`,
		ResolveRevision: `UPDATE ` + table + ` SET state = 'discarded', resolved_by = $2, resolved_at = $3
 WHERE id = $1 AND state = 'parked' AND revision_id = $4`,
		CountParked: `SELECT consumer, count(*) FROM ` + table + ` WHERE state = 'parked' GROUP BY consumer`,
		CountClass:  `SELECT count(*) FROM ` + table + ` WHERE error_class = $1`,
		CountParkedNoID: `SELECT consumer, count(*) FROM ` + table + `
 WHERE state = 'parked' AND substr(message_id, 1, length($1)) = $1 GROUP BY consumer`,
		Counts: `SELECT state, count(*) FROM ` + table + ` GROUP BY state`,
		Expire: `DELETE FROM ` + table + ` WHERE rowid IN (SELECT rowid FROM ` + table + ` WHERE ` + resolved + ` LIMIT $2) AND ` + resolved,
	}
}
