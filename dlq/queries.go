package dlq

import "github.com/idemkit/idem/store"

// letterColumns is the column list every read selects, in scanLetter order.
const letterColumns = `id, consumer, source, position, message_id, msg_key, headers, payload, fingerprint,
 error, error_class, attempts, first_failed_at, last_failed_at, state, redriven_by, redriven_at,
 resolved_by, resolved_at, created_at, redrive_reason`

// queries holds the SQL of one dialect with the table name filled in.
type queries struct {
	park, get, list, claimRedrive, discard, countParked string
	// inboxRecord reads the expiry of the inbox record of (consumer,
	// message id): $1 consumer, $2 message id.
	inboxRecord string
}

func newQueries(d store.Dialect, t, inbox string) queries {
	q := queries{
		inboxRecord: `SELECT expires_at FROM ` + inbox + ` WHERE consumer = $1 AND message_id = $2`,
		get:         `SELECT ` + letterColumns + ` FROM ` + t + ` WHERE id = $1`,
		list:        `SELECT ` + letterColumns + ` FROM ` + t,
		discard: `UPDATE ` + t + ` SET state = 'discarded', resolved_by = $2, resolved_at = $3
 WHERE id = $1 AND state = 'parked'`,
		countParked: `SELECT consumer, count(*) FROM ` + t + ` WHERE state = 'parked' GROUP BY consumer`,
	}
	switch d {
	case store.Postgres:
		// The row lock taken by the UPDATE is held until the redrive's
		// transaction ends, so a concurrent redrive of the same letter waits
		// and then finds it no longer parked.
		q.claimRedrive = `UPDATE ` + t + ` SET state = 'redriven', redriven_by = $2, redriven_at = $3,
 resolved_by = $2, resolved_at = $3, redrive_reason = $4 WHERE id = $1 AND state = 'parked' RETURNING ` + letterColumns
		q.park = `INSERT INTO ` + t + ` AS dl (consumer, source, position, message_id, msg_key, headers, payload,
 fingerprint, error, error_class, attempts, first_failed_at, last_failed_at, state, created_at)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, 'parked', $12)
 ON CONFLICT (consumer, message_id, fingerprint) WHERE state = 'parked' DO UPDATE SET
 attempts = GREATEST(dl.attempts + 1, excluded.attempts),
 error = excluded.error, error_class = excluded.error_class,
 source = excluded.source, position = excluded.position, headers = excluded.headers,
 last_failed_at = excluded.last_failed_at
 RETURNING id`
	default: // SQLite: one writer at a time (BEGIN IMMEDIATE) serialises redrives.
		q.claimRedrive = `UPDATE ` + t + ` SET state = 'redriven', redriven_by = $2, redriven_at = $3,
 resolved_by = $2, resolved_at = $3, redrive_reason = $4 WHERE id = $1 AND state = 'parked' RETURNING ` + letterColumns
		q.park = `INSERT INTO ` + t + ` AS dl (consumer, source, position, message_id, msg_key, headers, payload,
 fingerprint, error, error_class, attempts, first_failed_at, last_failed_at, state, created_at)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, 'parked', $12)
 ON CONFLICT (consumer, message_id, fingerprint) WHERE state = 'parked' DO UPDATE SET
 attempts = max(dl.attempts + 1, excluded.attempts),
 error = excluded.error, error_class = excluded.error_class,
 source = excluded.source, position = excluded.position, headers = excluded.headers,
 last_failed_at = excluded.last_failed_at
 RETURNING id`
	}
	return q
}
