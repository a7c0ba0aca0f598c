package idemhttp

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// Expire deletes up to limit records whose retention ended before horizon
// (expires_at < horizon), whatever their state, and returns how many it
// deleted. A record past its retention is already treated as absent by the
// middleware; Expire reclaims its row ("idem gc", package retention).
func Expire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := d.Pool().Exec(ctx, d.Statements().HTTPKeys.Expire, store.Micros(horizon), limit)
	if err != nil {
		return n, fmt.Errorf("idemhttp: expire keys: %w", err)
	}
	return n, nil
}

// Counts returns the number of key records per stored state
// (StateInProgress, StateCompleted, StateFailed); a state without records
// is absent from the map.
func Counts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), d.Statements().HTTPKeys.Counts)
	if err != nil {
		return nil, fmt.Errorf("idemhttp: count keys: %w", err)
	}
	return out, nil
}
