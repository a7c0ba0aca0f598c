package idemmetrics

// Interim: the numbers whose owners do not export them yet (outbox.Counts
// and outbox.Backlog; inbox counts by consumer). Each function here is replaced by
// the owner's once it lands, and this file goes.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

func groupCount(ctx context.Context, q store.Querier, sql string, args ...any) (map[string]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

func outboxCounts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return groupCount(ctx, d.Pool(), `SELECT state, count(*) FROM `+d.Table("outbox")+` GROUP BY state`)
}

// outboxBacklog is outbox.Backlog: pending events and the age of the
// oldest.
type outboxBacklogT struct {
	Pending int64
	Oldest  time.Duration
}

func outboxBacklog[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time) (outboxBacklogT, error) {
	q, t := d.Pool(), d.Table("outbox")
	var b outboxBacklogT
	if err := q.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE state = 'pending'`).Scan(&b.Pending); err != nil {
		return b, fmt.Errorf("outbox pending: %w", err)
	}
	var oldest int64
	err := q.QueryRow(ctx, `SELECT created_at FROM `+t+` WHERE state = 'pending' ORDER BY seq LIMIT 1`).Scan(&oldest)
	if errors.Is(err, store.ErrNoRows) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("outbox lag: %w", err)
	}
	b.Oldest = max(now.Sub(store.FromMicros(oldest)), 0)
	return b, nil
}

func inboxByConsumer[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return groupCount(ctx, d.Pool(), `SELECT consumer, count(*) FROM `+d.Table("inbox")+` GROUP BY consumer`)
}
