package sqlmeta

import (
	"context"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlset"
)

// statements returns d's catalogue statements.
func statements[TTx any](d store.Driver[TTx]) sqlset.SQLMeta { return d.Statements().SQLMeta }

// Exists reports whether idem's table name exists, on q of dialect d.
//
// Deprecated: use [TableExists] (kept until the idem command's three
// callers move to it).
func Exists(ctx context.Context, q store.Querier, d store.Dialect, names store.Names, name string) (bool, error) {
	var n int64
	st := sqlset.SQLMeta{TableExists: `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1`}
	if d == store.Postgres {
		st.TableExists = `SELECT count(*) FROM pg_catalog.pg_class WHERE oid = to_regclass($1) AND relkind IN ('r', 'p')`
	}
	if err := q.QueryRow(ctx, st.TableExists, names.Table(d, name)).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}
