package sqlite

import "github.com/idemkit/idem/internal/sqlset"

// effectCols is the column list of every statement returning an effect
// (sqlset.Effects).
const effectCols = `effect_key, kind, payload, fingerprint, state, attempts, token, lease_until,
	next_attempt_at, result, last_error, created_at, updated_at, completed_at, expires_at, traceparent, tracestate, first_attempt_at, held_at`

func effects(t func(string) string) sqlset.Effects {
	table := t("effects")
	const (
		due = `kind = $4 AND state IN ('pending', 'in_progress') AND next_attempt_at <= $1 AND held_at = 0`
		set = `state = 'in_progress', token = token + 1, attempts = attempts + 1, lease_until = $3, next_attempt_at = $3, updated_at = $1,
		first_attempt_at = CASE WHEN first_attempt_at = 0 THEN $1 ELSE first_attempt_at END`
		expired = `state = 'completed' AND expires_at > 0 AND expires_at < $1`
	)
	return sqlset.Effects{
		Schedule: `INSERT INTO ` + table + ` (effect_key, kind, payload, fingerprint, state, next_attempt_at, created_at, updated_at, traceparent, tracestate)
			VALUES ($1, $2, $3, $4, 'pending', $5, $6, $6, $7, $8)
			ON CONFLICT (effect_key) DO NOTHING
			RETURNING ` + effectCols,
		Get: `SELECT ` + effectCols + ` FROM ` + table + ` WHERE effect_key = $1`,
		Insert: `INSERT INTO ` + table + ` (effect_key, kind, payload, fingerprint, state, attempts, token, lease_until, next_attempt_at, created_at, updated_at)
			VALUES ($1, '', $5, $2, 'in_progress', 1, 1, $3, $3, $4, $4)
			ON CONFLICT (effect_key) DO NOTHING
			RETURNING ` + effectCols,
		TakeOver: `UPDATE ` + table + ` SET state = 'in_progress', token = token + 1, attempts = attempts + 1,
				lease_until = $3, next_attempt_at = $3, updated_at = $4
			WHERE effect_key = $1 AND token = $2 AND state IN ('pending', 'in_progress')
			RETURNING ` + effectCols,
		// One writer at a time: the single UPDATE … WHERE effect_key IN
		// (SELECT … LIMIT) is atomic.
		Claim: `UPDATE ` + table + ` SET ` + set + `
			WHERE effect_key IN (SELECT effect_key FROM ` + table + ` WHERE ` + due + `
				ORDER BY next_attempt_at LIMIT $2)
			RETURNING ` + effectCols,
		Complete: `UPDATE ` + table + ` SET state = 'completed', result = $3, last_error = '', lease_until = 0,
				next_attempt_at = 0, completed_at = $4, updated_at = $4, expires_at = $5
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		Release: `UPDATE ` + table + ` SET state = 'pending', lease_until = 0, next_attempt_at = $3, last_error = $4,
				updated_at = $5, attempts = attempts - $6
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		Fail: `UPDATE ` + table + ` SET state = 'failed', lease_until = 0, next_attempt_at = 0, last_error = $3, updated_at = $4
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'
			RETURNING ` + effectCols,
		Hold: `UPDATE ` + table + ` SET held_at = $3, lease_until = 0, next_attempt_at = 0, last_error = $4, updated_at = $3,
				attempts = attempts - 1
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		// A held effect redriven by an operator (who reconciled it with the
		// provider) starts a new key lifetime; a failed one keeps its first
		// attempt, so a redrive past the lifetime is held, not called.
		Redrive: `UPDATE ` + table + ` SET state = 'pending', attempts = 0, lease_until = 0, next_attempt_at = $2, updated_at = $2,
				first_attempt_at = CASE WHEN held_at > 0 THEN 0 ELSE first_attempt_at END, held_at = 0
			WHERE effect_key = $1 AND (state = 'failed' OR (state = 'in_progress' AND lease_until <= $2))`,
		Resolve: `UPDATE ` + table + ` SET state = 'completed', result = $2, last_error = '', lease_until = 0,
				next_attempt_at = 0, completed_at = $3, updated_at = $3, expires_at = $4, held_at = 0
			WHERE effect_key = $1 AND (state IN ('pending', 'failed') OR (state = 'in_progress' AND lease_until <= $3))`,
		ListState: `SELECT ` + effectCols + ` FROM ` + table + ` WHERE state = $1 ORDER BY updated_at, effect_key LIMIT $2`,
		ListHeld:  `SELECT ` + effectCols + ` FROM ` + table + ` WHERE held_at > 0 AND state = 'in_progress' ORDER BY held_at, effect_key LIMIT $1`,

		// The condition is repeated outside the row-id subquery, as on
		// PostgreSQL (the single writer makes the two evaluations agree).
		Expire:         `DELETE FROM ` + table + ` WHERE rowid IN (SELECT rowid FROM ` + table + ` WHERE ` + expired + ` LIMIT $2) AND ` + expired,
		CountByState:   `SELECT state, count(*) FROM ` + table + ` GROUP BY state`,
		CountHeld:      `SELECT kind, count(*) FROM ` + table + ` WHERE held_at > 0 AND state = 'in_progress' GROUP BY kind`,
		CountAbandoned: `SELECT count(*) FROM ` + table + ` WHERE state = 'in_progress' AND lease_until <= $1`,
		CountByKind:    `SELECT kind, count(*) FROM ` + table + ` GROUP BY kind`,

		// No FOR UPDATE: a write transaction (BEGIN IMMEDIATE) holds the
		// database lock already.
		Lock:  `SELECT state FROM ` + table + ` WHERE effect_key = $1`,
		Fence: `UPDATE ` + table + ` SET updated_at = updated_at WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		Token: `SELECT token FROM ` + table + ` WHERE effect_key = $1 AND state = 'in_progress'`,
	}
}
