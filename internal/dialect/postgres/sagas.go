package postgres

import "github.com/idemkit/idem/internal/sqlset"

func sagas(t func(string) string) sqlset.Sagas {
	sg, st, ef := t("sagas"), t("saga_steps"), t("effects")
	const cols = `saga_id, name, state, step, steps, current_key, abort_requested, version, last_error, input, created_at, updated_at`
	// A finished saga's updated_at is its finish time: nothing updates a
	// finished saga again.
	const finished = `state IN ('completed', 'compensated') AND updated_at < $1`
	steps := `saga_id IN (SELECT saga_id FROM ` + sg + ` WHERE ` + finished + `)`
	done := finished + ` AND NOT EXISTS (SELECT 1 FROM ` + st + ` st WHERE st.saga_id = ` + sg + `.saga_id)`
	return sqlset.Sagas{
		Insert: `INSERT INTO ` + sg + ` (saga_id, name, fingerprint, input, state, step, steps, current_key, created_at, updated_at)
 VALUES ($1, $2, $3, $4, 'running', 0, $5, $6, $7, $7)
 ON CONFLICT (saga_id) DO NOTHING
 RETURNING ` + cols,
		Get:            `SELECT ` + cols + ` FROM ` + sg + ` WHERE saga_id = $1`,
		GetFingerprint: `SELECT ` + cols + `, fingerprint FROM ` + sg + ` WHERE saga_id = $1`,
		List:           `SELECT ` + cols + ` FROM ` + sg + ` WHERE ($1 = '' OR state = $1) ORDER BY updated_at DESC, saga_id LIMIT $2`,
		Counts:         `SELECT state, count(*) FROM ` + sg + ` GROUP BY state`,
		Steps: `SELECT step, step_name, op, origin, outcome, result, created_at, updated_at FROM ` + st + `
 WHERE saga_id = $1 ORDER BY step, op`,
		Abort: `UPDATE ` + sg + ` SET abort_requested = 1, last_error = $2, version = version + 1, updated_at = $3
 WHERE saga_id = $1 AND state = 'running'`,
		LockSaga: `SELECT state, step, steps, current_key, abort_requested FROM ` + sg + ` WHERE saga_id = $1 FOR UPDATE`,
		Aborting: `SELECT state, abort_requested FROM ` + sg + ` WHERE saga_id = $1`,
		Advance: `UPDATE ` + sg + ` SET state = $3, step = $4, current_key = $5, last_error = $6, abort_requested = 0,
 version = version + 1, updated_at = $7
 WHERE saga_id = $1 AND version = $2`,
		Due: `SELECT s.saga_id, s.name, s.state, s.step, s.steps, s.current_key, s.abort_requested, s.version, s.last_error,
 s.input, s.created_at, s.updated_at, COALESCE(e.state, ''), e.result, COALESCE(e.last_error, '')
 FROM ` + sg + ` s LEFT JOIN ` + ef + ` e ON e.effect_key = s.current_key
 WHERE s.state IN ('running', 'compensating', 'held') AND (
 (s.state IN ('running', 'compensating') AND e.state IN ('completed', 'failed'))
 OR (s.state = 'running' AND s.abort_requested = 1)
 OR (s.state = 'held' AND e.state = 'completed'))
 AND s.name IN (SELECT jsonb_array_elements_text($2::jsonb))
 ORDER BY s.updated_at LIMIT $1`,
		Touch: `UPDATE ` + sg + ` SET updated_at = $3 WHERE saga_id = $1 AND version = $2`,
		InsertBarrier: `INSERT INTO ` + st + ` (saga_id, step, op, step_name, origin, outcome, created_at, updated_at)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
 ON CONFLICT (saga_id, step, op) DO NOTHING`,
		GetBarrier: `SELECT origin, outcome, result FROM ` + st + ` WHERE saga_id = $1 AND step = $2 AND op = $3`,
		SetBarrier: `UPDATE ` + st + ` SET outcome = $4, result = $5, updated_at = $6
 WHERE saga_id = $1 AND step = $2 AND op = $3 AND outcome = $7`,
		Results: `SELECT step_name, result FROM ` + st + ` WHERE saga_id = $1 AND op = 'do' AND outcome = 'applied'`,

		ExpireSteps: `DELETE FROM ` + st + ` WHERE ctid IN (SELECT ctid FROM ` + st + ` WHERE ` + steps + ` LIMIT $2) AND ` + steps,
		Expire:      `DELETE FROM ` + sg + ` WHERE ctid IN (SELECT ctid FROM ` + sg + ` WHERE ` + done + ` LIMIT $2) AND ` + done,
	}
}
