package sqlmeta

import (
	"context"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlset"
)

// statements returns d's catalogue statements.
//
// Interim, until sqlset.Set carries them (field SQLMeta, filled by
// store/postgres and store/sqlite sqlMeta): the same texts as those files.
func statements[TTx any](d store.Driver[TTx]) sqlset.SQLMeta {
	if d.Dialect() == store.Postgres {
		return sqlset.SQLMeta{
			TableExists:  `SELECT count(*) FROM pg_catalog.pg_class WHERE oid = to_regclass($1) AND relkind IN ('r', 'p')`,
			EstimateRows: `SELECT coalesce((SELECT reltuples::float8 FROM pg_catalog.pg_class WHERE oid = to_regclass($1)), -1)`,
		}
	}
	return sqlset.SQLMeta{TableExists: `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1`}
}

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
