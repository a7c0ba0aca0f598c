package operator

import (
	"context"
	"fmt"
	"time"
)

// The idempotency_keys table (package idemhttp): counts, expiry, and the
// operator's look-up, release and resolution of key records.

// HTTPKeyExpire deletes up to limit key records whose retention ended
// before horizon (expires_at < horizon), whatever their state, and returns
// how many it deleted (0 when limit ≤ 0). A record past its retention is
// already treated as absent by the middleware; HTTPKeyExpire reclaims its
// row ("idem gc", package retention).
func HTTPKeyExpire(ctx context.Context, d DB, horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	return expire(ctx, d, "idemhttp: expire keys", d.Statements().HTTPKeys.Expire, horizon, limit)
}

// HTTPKeyCounts returns the number of key records per stored state
// ("in_progress", "completed", "failed"); a state without records is
// absent from the map.
func HTTPKeyCounts(ctx context.Context, d DB) (map[string]int64, error) {
	out, err := CountBy(ctx, d.Pool(), d.Statements().HTTPKeys.Counts)
	if err != nil {
		return nil, fmt.Errorf("idemhttp: count keys: %w", err)
	}
	return out, nil
}
