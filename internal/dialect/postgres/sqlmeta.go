package postgres

import "github.com/idemkit/idem/internal/sqlset"

// sqlMeta is the catalogue statements of internal/sqlmeta. $1 is a
// qualified table name ("idem".inbox), resolved by to_regclass (NULL, and
// so no row of pg_class, when the table does not exist).
func sqlMeta() sqlset.SQLMeta {
	return sqlset.SQLMeta{
		TableExists:  `SELECT count(*) FROM pg_catalog.pg_class WHERE oid = to_regclass($1) AND relkind IN ('r', 'p')`,
		EstimateRows: `SELECT coalesce((SELECT reltuples::float8 FROM pg_catalog.pg_class WHERE oid = to_regclass($1)), -1)`,
	}
}
