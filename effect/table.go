package effect

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// Expire deletes up to limit completed effects whose expires_at (set from
// [Config.Retention] when they completed; 0 keeps them) passed before
// horizon, and returns the number deleted. Pending, in_progress (held
// included) and failed effects are never deleted. The retention GC calls it
// in batches.
func Expire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := d.Pool().Exec(ctx, d.Statements().Effects.Expire, store.Micros(horizon), limit)
	if err != nil {
		return 0, fmt.Errorf("effect: expire: %w", err)
	}
	return n, nil
}

// Counts returns the number of effects per stored state ("pending",
// "in_progress", "completed", "failed"); a state without effects is
// absent. Held effects ([Effect.HeldAt]) are stored in_progress and counted
// there; [CountHeld] counts them apart.
func Counts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), d.Statements().Effects.CountByState)
	if err != nil {
		return nil, fmt.Errorf("effect: counts: %w", err)
	}
	return out, nil
}

// CountHeld returns the number of effects held for reconciliation (see
// [WithKeyLifetime]) per kind; a kind without held effects is absent.
func CountHeld[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), d.Statements().Effects.CountHeld)
	if err != nil {
		return nil, fmt.Errorf("effect: count held: %w", err)
	}
	return out, nil
}

// CountAbandoned returns the number of in_progress effects whose lease
// ended by now: their worker crashed or hung (held effects, which have no
// lease, are included).
func CountAbandoned[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time) (int64, error) {
	var n int64
	if err := d.Pool().QueryRow(ctx, d.Statements().Effects.CountAbandoned, store.Micros(now)).Scan(&n); err != nil {
		return 0, fmt.Errorf("effect: count abandoned: %w", err)
	}
	return n, nil
}
