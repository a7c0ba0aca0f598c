package saga

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// The sagas and saga_steps tables are this package's: their states, their
// statements (sqlset.Sagas), their counts and their expiry. Other packages
// (retention, idemmetrics, the console) read and expire them through these
// functions.

// Expire deletes up to limit rows of sagas that finished (completed or
// compensated) before horizon, their barrier rows first: it deletes up to
// limit saga_steps rows ([ExpireSteps]) and, when fewer than limit were
// left, finished sagas without barrier rows for the rest of the limit. It
// returns the rows deleted from both tables; call it until it returns
// fewer than limit.
//
// A finished saga never changes state again, and updated_at is its finish
// time. Running, compensating and held sagas are never touched, nor their
// steps, however old; a saga whose steps remain (a pass stopped between
// the two tables) waits for the next call, so no step row is ever left
// without its saga. An effect redriven after its saga was deleted finds
// the saga gone and is refused (see the worker's live check).
func Expire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	steps, err := ExpireSteps(ctx, d, horizon, limit)
	if err != nil || steps >= int64(limit) {
		return steps, err
	}
	sagas, err := ExpireSagas(ctx, d, horizon, limit-int(steps))
	return steps + sagas, err
}

// ExpireSteps deletes up to limit barrier rows (saga_steps) of sagas that
// finished before horizon and returns how many it deleted; [Expire] calls
// it first. Callers that report the two tables apart call ExpireSteps
// until it returns fewer than limit, then [ExpireSagas].
func ExpireSteps[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	n, err := d.Pool().Exec(ctx, d.Statements().Sagas.ExpireSteps, store.Micros(horizon), limit)
	if err != nil {
		return n, fmt.Errorf("saga: expire steps: %w", err)
	}
	return n, nil
}

// ExpireSagas deletes up to limit sagas that finished before horizon and
// have no barrier rows left, and returns how many it deleted.
func ExpireSagas[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	n, err := d.Pool().Exec(ctx, d.Statements().Sagas.Expire, store.Micros(horizon), limit)
	if err != nil {
		return n, fmt.Errorf("saga: expire: %w", err)
	}
	return n, nil
}

// Counts returns the number of sagas per stored state ("running",
// "compensating", "completed", "compensated", "held"); states without
// sagas are absent.
func Counts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), d.Statements().Sagas.Counts)
	if err != nil {
		return nil, fmt.Errorf("saga: counts: %w", err)
	}
	return out, nil
}
