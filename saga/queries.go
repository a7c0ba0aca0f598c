package saga

import (
	"github.com/idemkit/idem/store"
)

const sagaCols = `saga_id, name, state, step, steps, current_key, abort_requested, version, last_error, input, created_at, updated_at`

type queries struct {
	insert string // $1 id, $2 name, $3 fingerprint, $4 input, $5 steps, $6 current_key, $7 now
	get    string // $1 id
	getFP  string // $1 id (sagaCols + fingerprint)
	list   string // $1 state ('' = all), $2 limit
	counts string
	steps  string // $1 id
	abort  string // $1 id, $2 last_error, $3 now
	// lockSaga and lockEffect read a row and lock it (PostgreSQL FOR UPDATE;
	// SQLite's write transactions hold the database lock already).
	lockSaga   string // $1 id → state, step, steps, current_key, abort_requested
	lockEffect string // $1 effect key → state
	aborting   string // $1 id → state, abort_requested
	advance    string // $1 id, $2 observed version, $3 state, $4 step, $5 current_key, $6 last_error, $7 now
	due        string // $1 limit: sagas whose awaited effect settled, or asked to abort (the active-state predicate matches sagas_active_idx)

	insertBarrier string // $1 id, $2 step, $3 op, $4 step name, $5 origin, $6 outcome, $7 now
	getBarrier    string // $1 id, $2 step, $3 op → origin, outcome, result
	setBarrier    string // $1 id, $2 step, $3 op, $4 outcome, $5 result, $6 now, $7 required outcome
	results       string // $1 id → step name, result of applied actions
	fence         string // $1 effect key, $2 token
	token         string // $1 effect key
}

func newQueries[TTx any](d store.Driver[TTx]) queries {
	sg, st, ef := d.Table("sagas"), d.Table("saga_steps"), d.Table("effects")
	forUpdate := ""
	if d.Dialect() == store.Postgres {
		forUpdate = " FOR UPDATE"
	}
	return queries{
		lockSaga:   `SELECT state, step, steps, current_key, abort_requested FROM ` + sg + ` WHERE saga_id = $1` + forUpdate,
		lockEffect: `SELECT state FROM ` + ef + ` WHERE effect_key = $1` + forUpdate,
		aborting:   `SELECT state, abort_requested FROM ` + sg + ` WHERE saga_id = $1`,
		insert: `INSERT INTO ` + sg + ` (saga_id, name, fingerprint, input, state, step, steps, current_key, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 'running', 0, $5, $6, $7, $7)
			ON CONFLICT (saga_id) DO NOTHING
			RETURNING ` + sagaCols,
		get:    `SELECT ` + sagaCols + ` FROM ` + sg + ` WHERE saga_id = $1`,
		getFP:  `SELECT ` + sagaCols + `, fingerprint FROM ` + sg + ` WHERE saga_id = $1`,
		list:   `SELECT ` + sagaCols + ` FROM ` + sg + ` WHERE ($1 = '' OR state = $1) ORDER BY updated_at DESC, saga_id LIMIT $2`,
		counts: `SELECT state, count(*) FROM ` + sg + ` GROUP BY state`,
		steps: `SELECT step, step_name, op, origin, outcome, result, created_at, updated_at FROM ` + st + `
			WHERE saga_id = $1 ORDER BY step, op`,
		abort: `UPDATE ` + sg + ` SET abort_requested = 1, last_error = $2, version = version + 1, updated_at = $3
			WHERE saga_id = $1 AND state = 'running'`,
		advance: `UPDATE ` + sg + ` SET state = $3, step = $4, current_key = $5, last_error = $6, abort_requested = 0,
				version = version + 1, updated_at = $7
			WHERE saga_id = $1 AND version = $2`,
		due: `SELECT s.saga_id, s.name, s.state, s.step, s.steps, s.current_key, s.abort_requested, s.version, s.last_error,
				s.input, s.created_at, s.updated_at, COALESCE(e.state, ''), e.result, COALESCE(e.last_error, '')
			FROM ` + sg + ` s LEFT JOIN ` + ef + ` e ON e.effect_key = s.current_key
			WHERE s.state IN ('running', 'compensating', 'held') AND (
				(s.state IN ('running', 'compensating') AND e.state IN ('completed', 'failed'))
				OR (s.state = 'running' AND s.abort_requested = 1)
				OR (s.state = 'held' AND e.state = 'completed'))
			ORDER BY s.updated_at LIMIT $1`,
		insertBarrier: `INSERT INTO ` + st + ` (saga_id, step, op, step_name, origin, outcome, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
			ON CONFLICT (saga_id, step, op) DO NOTHING`,
		getBarrier: `SELECT origin, outcome, result FROM ` + st + ` WHERE saga_id = $1 AND step = $2 AND op = $3`,
		setBarrier: `UPDATE ` + st + ` SET outcome = $4, result = $5, updated_at = $6
			WHERE saga_id = $1 AND step = $2 AND op = $3 AND outcome = $7`,
		results: `SELECT step_name, result FROM ` + st + ` WHERE saga_id = $1 AND op = 'do' AND outcome = 'applied'`,
		// fence locks the claimed effect row (PostgreSQL: the row lock the
		// ledger's complete and take-over need too) and proves the token is
		// still the claimer's.
		fence: `UPDATE ` + ef + ` SET updated_at = updated_at WHERE effect_key = $1 AND token = $2 AND state = 'in_progress'`,
		token: `SELECT token FROM ` + ef + ` WHERE effect_key = $1 AND state = 'in_progress'`,
	}
}

func scanSaga(r store.Row, extra ...any) (Saga, error) {
	var (
		s                  Saga
		state              string
		step, steps, abort int64
		created, upd       int64
	)
	dest := append([]any{&s.ID, &s.Name, &state, &step, &steps, &s.CurrentKey, &abort, &s.version, &s.LastError, &s.Input, &created, &upd}, extra...)
	if err := r.Scan(dest...); err != nil {
		return Saga{}, err
	}
	s.State, s.Step, s.Steps, s.AbortRequested = State(state), int(step), int(steps), abort != 0
	s.CreatedAt, s.UpdatedAt = store.FromMicros(created), store.FromMicros(upd)
	return s, nil
}
