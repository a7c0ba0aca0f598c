package sqlite

import "github.com/idemkit/idem/internal/sqlset"

// sqlMeta is the catalogue statements of internal/sqlmeta. $1 is a
// prefixed table name (idem_inbox). SQLite keeps no row estimate
// (EstimateRows is empty): the rows are counted.
func sqlMeta() sqlset.SQLMeta {
	return sqlset.SQLMeta{
		TableExists: `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1`,
	}
}
