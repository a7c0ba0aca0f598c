// Package sqlmeta answers questions about idem's own tables that the
// operator-facing packages (retention, idemmetrics, the console, the idem
// command) share: does a table exist yet, and roughly how many rows does
// it hold. Its statements are the driver's (sqlset.SQLMeta, one text per
// dialect in internal/dialect/postgres and internal/dialect/sqlite).
package sqlmeta

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/store"
)

// TableExists reports whether idem's table name (unqualified, e.g.
// "outbox") exists in d's schema / prefix: a part whose migration is not
// applied yet has no table.
func TableExists[TTx any](ctx context.Context, d store.Driver[TTx], name string) (bool, error) {
	var n int64
	if err := d.Pool().QueryRow(ctx, statements(d).TableExists, d.Table(name)).Scan(&n); err != nil {
		return false, fmt.Errorf("sqlmeta: table %s: %w", name, err)
	}
	return n > 0, nil
}

// EstimateRows returns a cheap row-count estimate of idem's table name
// (pg_class.reltuples on PostgreSQL). ok is false when there is none: the
// dialect keeps no estimate (SQLite) or the table was never analysed; the
// caller then counts the rows exactly, through the table's owner.
func EstimateRows[TTx any](ctx context.Context, d store.Driver[TTx], name string) (n int64, ok bool, err error) {
	stmt := statements(d).EstimateRows
	if stmt == "" {
		return 0, false, nil
	}
	var est float64
	if err := d.Pool().QueryRow(ctx, stmt, d.Table(name)).Scan(&est); err != nil {
		return 0, false, fmt.Errorf("sqlmeta: estimate %s: %w", name, err)
	}
	if est < 0 {
		return 0, false, nil
	}
	return int64(est), true, nil
}
