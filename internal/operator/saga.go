package operator

import (
	"context"
	"time"
)

// The sagas and saga_steps tables (package saga): their counts and their
// expiry.

// SagaExpire deletes up to limit rows of sagas that finished (completed or
// compensated) before horizon, their barrier rows first: it deletes up to
// limit saga_steps rows ([SagaExpireSteps]) and, when fewer than limit
// were left, finished sagas without barrier rows for the rest of the
// limit. It returns the rows deleted from both tables; call it until it
// returns fewer than limit.
//
// A finished saga never changes state again, and updated_at is its finish
// time. Running, compensating and held sagas are never touched, nor their
// steps, however old; a saga whose steps remain (a pass stopped between
// the two tables) waits for the next call, so no step row is ever left
// without its saga. An effect redriven after its saga was deleted finds
// the saga gone and is refused (see the saga worker's live check).
func SagaExpire(ctx context.Context, d DB, horizon time.Time, limit int) (int64, error) {
	steps, err := SagaExpireSteps(ctx, d, horizon, limit)
	if err != nil || steps >= int64(limit) {
		return steps, err
	}
	sagas, err := SagaExpireSagas(ctx, d, horizon, limit-int(steps))
	return steps + sagas, err
}

// SagaExpireSteps deletes up to limit barrier rows (saga_steps) of sagas
// that finished before horizon and returns how many it deleted;
// [SagaExpire] calls it first. Callers that report the two tables apart
// call SagaExpireSteps until it returns fewer than limit, then
// [SagaExpireSagas].
func SagaExpireSteps(ctx context.Context, d DB, horizon time.Time, limit int) (int64, error) {
	return expire(ctx, d, "saga: expire steps", d.Statements().Sagas.ExpireSteps, horizon, limit)
}

// SagaExpireSagas deletes up to limit sagas that finished before horizon
// and have no barrier rows left, and returns how many it deleted.
func SagaExpireSagas(ctx context.Context, d DB, horizon time.Time, limit int) (int64, error) {
	return expire(ctx, d, "saga: expire", d.Statements().Sagas.Expire, horizon, limit)
}

// SagaCounts returns the number of sagas per stored state ("running",
// "compensating", "completed", "compensated", "held"); states without
// sagas are absent.
func SagaCounts(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "saga: counts", d.Statements().Sagas.Counts)
}
