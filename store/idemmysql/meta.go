package idemmysql

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

func meta(t func(string) string, n store.Names) sqlset.Meta {
	migrations := t("migrations")
	expand := strings.NewReplacer("{{t}}", n.Prefix, "{{p}}", n.Prefix, "{{schema}}", n.Schema)
	return sqlset.Meta{
		Migrations: Migrations(),
		Expand:     expand.Replace,
		// A named session lock per database and prefix (MySQL caps names
		// at 64 characters, hence the hash), taken in a transaction of
		// Driver.Begin and released when it ends. The prefix is an
		// identifier validated by store.Names.WithDefaults.
		MigrateLock:       `/*idem:lock*/ SELECT GET_LOCK(CONCAT('idem.migrate.', SHA1(CONCAT(DATABASE(), '.` + n.Prefix + `'))), 120)`,
		CreateSchema:      "",
		CreateMigrations:  `CREATE TABLE IF NOT EXISTS ` + migrations + ` (version INT PRIMARY KEY, name VARBINARY(255) NOT NULL, applied_at BIGINT NOT NULL) ENGINE=InnoDB`,
		RecordMigration:   `INSERT INTO ` + migrations + ` (version, name, applied_at) VALUES ($1, $2, $3)`,
		AppliedMigrations: `SELECT version, applied_at FROM ` + migrations,
		VersionGuard:      versionGuard,
	}
}

// versionGuard builds a version-guarded write (see sqlset.Meta.VersionGuard):
//
//	UPDATE t SET cols…, version = $v WHERE keys… AND version < $v
//
// and, with Upsert, a script: INSERT … ON DUPLICATE KEY UPDATE whose
// assignments keep the stored values unless the stored version is lower,
// noting in a session variable whether it was (evaluated in the first
// assignment, before version itself is assigned last), then the number of
// rows written: 1 when the row was inserted or updated, 0 otherwise.
// ON DUPLICATE KEY takes the row's exclusive lock at once; an INSERT that
// failed on the key and then updated would hold a shared lock first, and
// two such writers deadlock. (Affected rows cannot tell an insert from an
// unchanged row under clientFoundRows: both are 1.)
func versionGuard(w sqlset.VersionedWrite) sqlset.VersionedSQL {
	quote := func(name string) string { return "`" + strings.ReplaceAll(name, ".", "`.`") + "`" }
	ph := func(i int) string { return "$" + strconv.Itoa(i) }
	table, vc := quote(w.Table), quote(w.Version)
	keys := make([]string, len(w.Keys))
	where := make([]string, len(w.Keys))
	for i, k := range w.Keys {
		keys[i] = quote(k)
		where[i] = keys[i] + " = " + ph(i+1)
	}
	set := make([]string, len(w.Set))
	for i, c := range w.Set {
		set[i] = quote(c)
	}
	v := ph(len(w.Keys) + len(w.Set) + 1)
	// The version is read with a locking read: the latest committed one, as
	// the write saw it, even in a caller's REPEATABLE READ transaction.
	out := sqlset.VersionedSQL{Current: `SELECT ` + vc + ` FROM ` + table + ` WHERE ` + strings.Join(where, " AND ") + ` LOCK IN SHARE MODE`}
	if !w.Upsert {
		assign := make([]string, 0, len(set)+1)
		for i, c := range set {
			assign = append(assign, c+" = "+ph(len(w.Keys)+i+1))
		}
		assign = append(assign, vc+" = "+v)
		out.Write = `UPDATE ` + table + ` SET ` + strings.Join(assign, ", ") +
			` WHERE ` + strings.Join(where, " AND ") + ` AND ` + vc + ` < ` + v
		return out
	}
	cols := append(append(append([]string{}, keys...), set...), vc)
	vals := make([]string, len(cols))
	for i := range cols {
		vals[i] = ph(i + 1)
	}
	const newer = `@idem_vg_newer`
	assign := make([]string, 0, len(set)+1)
	for i, c := range append(append([]string{}, set...), vc) {
		cond := newer
		if i == 0 {
			// COALESCE: a NULL stored version is not older (as the other
			// dialects' ON CONFLICT … WHERE), and the flag stays 0/1.
			cond = `(` + newer + ` := COALESCE(` + vc + ` < VALUES(` + vc + `), FALSE))`
		}
		assign = append(assign, c+` = IF(`+cond+`, VALUES(`+c+`), `+c+`)`)
	}
	out.Write = `SET ` + newer + ` = NULL;
/*idem:quiet*/ INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) VALUES (` + strings.Join(vals, ", ") + `)
ON DUPLICATE KEY UPDATE ` + strings.Join(assign, ", ") + `;
/*idem:affected*/ SELECT CASE WHEN ` + newer + ` IS NULL OR ` + newer + ` THEN 1 ELSE 0 END`
	return out
}
