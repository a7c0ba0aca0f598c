package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// Expire deletes up to limit inbox records whose replay horizon passed
// before horizon (expires_at < horizon, set from the consumer's retention
// when the message was received) and returns the number deleted. The
// retention GC calls it in a loop until it deletes fewer than limit.
func Expire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("inbox: expire: limit %d must be positive", limit)
	}
	n, err := d.Pool().Exec(ctx, d.Statements().Inbox.Expire, store.Micros(horizon), limit)
	if err != nil {
		return n, fmt.Errorf("inbox: expire: %w", err)
	}
	return n, nil
}

// Counts returns the number of inbox records per stored state
// (lease.InProgress, lease.Completed, lease.Failed); a state without
// records is absent.
func Counts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	rows, err := d.Pool().Query(ctx, d.Statements().Inbox.CountByState)
	if err != nil {
		return nil, fmt.Errorf("inbox: counts: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("inbox: counts: %w", err)
		}
		out[state] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: counts: %w", err)
	}
	return out, nil
}
