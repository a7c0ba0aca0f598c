package idemmysql

import "github.com/idemkit/idem/internal/sqlset"

// sqlMeta is the catalogue statements of internal/sqlmeta. $1 is a
// prefixed table name (idem_inbox) in the connection's database.
// EstimateRows is InnoDB's estimate (information_schema.tables.table_rows).
func sqlMeta() sqlset.SQLMeta {
	return sqlset.SQLMeta{
		TableExists: `SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = $1`,
		EstimateRows: `SELECT COALESCE((SELECT CAST(table_rows AS DOUBLE) FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_name = $1), -1)`,
	}
}
