// Package sqlmeta answers questions about idem's own tables that the
// operator-facing packages (retention, idemmetrics) share: does a table
// exist yet, and roughly how many rows does it hold.
package sqlmeta

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/store"
)

// Exists reports whether idem's table name (unqualified, e.g. "outbox")
// exists in the driver's schema / prefix.
func Exists(ctx context.Context, q store.Querier, d store.Dialect, names store.Names, name string) (bool, error) {
	var n int64
	var err error
	switch d {
	case store.Postgres:
		err = q.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2`,
			names.Schema, name).Scan(&n)
	default:
		err = q.QueryRow(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1`,
			names.Prefix+name).Scan(&n)
	}
	if err != nil {
		return false, fmt.Errorf("sqlmeta: table %s: %w", name, err)
	}
	return n > 0, nil
}

// EstimateRows returns a cheap row-count estimate of idem's table name:
// pg_class.reltuples on PostgreSQL (an exact count(*) when the table was
// never analysed), count(*) on SQLite.
func EstimateRows(ctx context.Context, q store.Querier, d store.Dialect, names store.Names, qualified, name string) (int64, error) {
	var n int64
	if d == store.Postgres {
		var est float64
		err := q.QueryRow(ctx, `SELECT c.reltuples::float8 FROM pg_catalog.pg_class c
 JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1 AND c.relname = $2`,
			names.Schema, name).Scan(&est)
		if err != nil {
			return 0, fmt.Errorf("sqlmeta: estimate %s: %w", name, err)
		}
		if est >= 0 {
			return int64(est), nil
		}
	}
	if err := q.QueryRow(ctx, `SELECT count(*) FROM `+qualified).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlmeta: count %s: %w", name, err)
	}
	return n, nil
}
