package idemmetrics

// Interim: inbox counts by consumer (Stats.Inbox), until package inbox
// exports them. Each function here is replaced by
// the owner's once it lands, and this file goes.

import (
	"context"

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

func inboxByConsumer[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return groupCount(ctx, d.Pool(), `SELECT consumer, count(*) FROM `+d.Table("inbox")+` GROUP BY consumer`)
}
