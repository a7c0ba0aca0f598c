package store

import (
	"context"
)

// CountBy runs a query returning (name, count) rows — a "SELECT state,
// count(*) … GROUP BY state" — and returns the counts by name. The tables'
// owners build their Counts on it.
func CountBy(ctx context.Context, q Querier, sql string, args ...any) (map[string]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] += n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
