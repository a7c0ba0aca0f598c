package effect

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/store"
)

// cols is the column list every query returning an effect uses; scanEffect
// reads it in this order.
const cols = `effect_key, kind, payload, fingerprint, state, attempts, token, lease_until,
	next_attempt_at, result, last_error, created_at, updated_at, completed_at, expires_at, traceparent, tracestate, first_attempt_at, held_at`

// queries holds the SQL of one dialect, with the table name expanded.
type queries struct {
	dialect store.Dialect
	table   string

	schedule  string // $1 key, $2 kind, $3 payload, $4 fingerprint, $5 next_attempt_at, $6 now, $7 traceparent, $8 tracestate
	get       string // $1 key
	inline    string // $1 key, $2 fingerprint, $3 lease_until, $4 now
	takeOver  string // $1 key, $2 observed token, $3 lease_until, $4 now
	complete  string // $1 key, $2 token, $3 result, $4 now, $5 expires_at
	release   string // $1 key, $2 token, $3 next_attempt_at, $4 last_error, $5 now, $6 attempts delta (0 or 1)
	fail      string // $1 key, $2 token, $3 last_error, $4 now
	redrive   string // $1 key, $2 now
	resolve   string // $1 key, $2 result, $3 now, $4 expires_at
	counts    string
	listState string // $1 state, $2 limit
	hold      string // $1 key, $2 token, $3 now, $4 last_error
	listHeld  string // $1 limit
}

func newQueries(d store.Dialect, table string) queries {
	t := table
	return queries{
		dialect: d,
		table:   t,
		schedule: `INSERT INTO ` + t + ` (effect_key, kind, payload, fingerprint, state, next_attempt_at, created_at, updated_at, traceparent, tracestate)
			VALUES ($1, $2, $3, $4, 'pending', $5, $6, $6, $7, $8)
			ON CONFLICT (effect_key) DO NOTHING
			RETURNING ` + cols,
		get: `SELECT ` + cols + ` FROM ` + t + ` WHERE effect_key = $1`,
		inline: `INSERT INTO ` + t + ` (effect_key, kind, payload, fingerprint, state, attempts, token, lease_until, next_attempt_at, created_at, updated_at)
			VALUES ($1, '', $5, $2, 'in_progress', 1, 1, $3, $3, $4, $4)
			ON CONFLICT (effect_key) DO NOTHING
			RETURNING ` + cols,
		takeOver: `UPDATE ` + t + ` SET state = 'in_progress', token = token + 1, attempts = attempts + 1,
				lease_until = $3, next_attempt_at = $3, updated_at = $4
			WHERE effect_key = $1 AND token = $2 AND state IN ('pending', 'in_progress')
			RETURNING ` + cols,
		complete: `UPDATE ` + t + ` SET state = 'completed', result = $3, last_error = '', lease_until = 0,
				next_attempt_at = 0, completed_at = $4, updated_at = $4, expires_at = $5
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		release: `UPDATE ` + t + ` SET state = 'pending', lease_until = 0, next_attempt_at = $3, last_error = $4,
				updated_at = $5, attempts = attempts - $6
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		fail: `UPDATE ` + t + ` SET state = 'failed', lease_until = 0, next_attempt_at = 0, last_error = $3, updated_at = $4
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'
			RETURNING ` + cols,
		// A held effect redriven by an operator (who reconciled it with the
		// provider) starts a new key lifetime; a failed one keeps its first
		// attempt, so a redrive past the lifetime is held, not called.
		redrive: `UPDATE ` + t + ` SET state = 'pending', attempts = 0, lease_until = 0, next_attempt_at = $2, updated_at = $2,
				first_attempt_at = CASE WHEN held_at > 0 THEN 0 ELSE first_attempt_at END, held_at = 0
			WHERE effect_key = $1 AND (state = 'failed' OR (state = 'in_progress' AND lease_until <= $2))`,
		resolve: `UPDATE ` + t + ` SET state = 'completed', result = $2, last_error = '', lease_until = 0,
				next_attempt_at = 0, completed_at = $3, updated_at = $3, expires_at = $4, held_at = 0
			WHERE effect_key = $1 AND (state IN ('pending', 'failed') OR (state = 'in_progress' AND lease_until <= $3))`,
		hold: `UPDATE ` + t + ` SET held_at = $3, lease_until = 0, next_attempt_at = 0, last_error = $4, updated_at = $3,
				attempts = attempts - 1
			WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		listHeld:  `SELECT ` + cols + ` FROM ` + t + ` WHERE held_at > 0 AND state = 'in_progress' ORDER BY held_at, effect_key LIMIT $1`,
		counts:    `SELECT state, count(*) FROM ` + t + ` GROUP BY state`,
		listState: `SELECT ` + cols + ` FROM ` + t + ` WHERE state = $1 ORDER BY updated_at, effect_key LIMIT $2`,
	}
}

// claim returns the claim statement for kinds: it leases up to $2 due
// effects of those kinds. $1 now, $2 limit, $3 lease_until, $4… kinds.
//
// PostgreSQL selects the rows FOR UPDATE SKIP LOCKED, so concurrent workers
// never wait for or double-claim a row. SQLite has one writer at a time; the
// single UPDATE … WHERE effect_key IN (SELECT … LIMIT) is atomic.
func (q queries) claim(kinds []string) string {
	ph := make([]string, len(kinds))
	for i := range kinds {
		ph[i] = "$" + strconv.Itoa(i+4)
	}
	in := strings.Join(ph, ", ")
	due := `kind IN (` + in + `) AND state IN ('pending', 'in_progress') AND next_attempt_at <= $1 AND held_at = 0`
	set := `state = 'in_progress', token = token + 1, attempts = attempts + 1, lease_until = $3, next_attempt_at = $3, updated_at = $1,
		first_attempt_at = CASE WHEN first_attempt_at = 0 THEN $1 ELSE first_attempt_at END`
	if q.dialect == store.Postgres {
		return `WITH due AS (
				SELECT effect_key FROM ` + q.table + ` WHERE ` + due + `
				ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			UPDATE ` + q.table + ` e SET ` + set + `
			FROM due WHERE e.effect_key = due.effect_key
			RETURNING ` + prefixed("e.", cols)
	}
	return `UPDATE ` + q.table + ` SET ` + set + `
		WHERE effect_key IN (SELECT effect_key FROM ` + q.table + ` WHERE ` + due + `
			ORDER BY next_attempt_at LIMIT $2)
		RETURNING ` + cols
}

func prefixed(p, list string) string {
	parts := strings.Split(list, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

func scanEffect(r store.Row) (Effect, error) {
	var (
		e                                  Effect
		state                              string
		lease, next, created, upd, cmp, ex int64
		attempts, first, held              int64
	)
	err := r.Scan(&e.Key, &e.Kind, &e.Payload, &e.fingerprint, &state, &attempts, &e.Token, &lease,
		&next, &e.Result, &e.LastError, &created, &upd, &cmp, &ex, &e.TraceParent, &e.TraceState, &first, &held)
	if err != nil {
		return Effect{}, err
	}
	e.State = State(state)
	e.Attempts = int(attempts)
	e.LeaseUntil = store.FromMicros(lease)
	e.NextAttemptAt = store.FromMicros(next)
	e.CreatedAt = store.FromMicros(created)
	e.UpdatedAt = store.FromMicros(upd)
	e.CompletedAt = store.FromMicros(cmp)
	e.ExpiresAt = store.FromMicros(ex)
	e.FirstAttemptAt = store.FromMicros(first)
	e.HeldAt = store.FromMicros(held)
	return e, nil
}
