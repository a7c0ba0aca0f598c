package boxoffice

import (
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
)

// The few business statements whose form differs on MySQL, which has no
// ON CONFLICT and no RETURNING: store/mysql's Querier skips a duplicate
// key for an INSERT marked SkipDuplicate, and reads a row back after the
// write that matched it (IfWritten).

// insertOrSkip is insert (an INSERT without ON CONFLICT) skipping a
// duplicate of the conflict target ("(order_id)", or "" for any key).
func insertOrSkip(d store.Dialect, insert, target string) string {
	if d == idemmysql.Dialect {
		return idemmysql.SkipDuplicate + insert
	}
	return insert + ` ON CONFLICT ` + target + ` DO NOTHING`
}

// updateReturning is update followed by RETURNING cols: on MySQL the
// row is selected by where (the update's key condition) once the update
// matched it.
func updateReturning(d store.Dialect, update, cols, from, where string) string {
	if d == idemmysql.Dialect {
		return update + idemmysql.IfWritten + `SELECT ` + cols + ` FROM ` + from + ` WHERE ` + where
	}
	return update + ` RETURNING ` + cols
}

// isMySQL reports whether d is MySQL or MariaDB.
func isMySQL(d store.Dialect) bool { return d == idemmysql.Dialect }
