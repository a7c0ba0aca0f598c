package sqlite

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
		// BEGIN IMMEDIATE serialises migrators; there are no schemas.
		MigrateLock:       "",
		CreateSchema:      "",
		CreateMigrations:  `CREATE TABLE IF NOT EXISTS ` + migrations + ` (version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)`,
		RecordMigration:   `INSERT INTO ` + migrations + ` (version, name, applied_at) VALUES ($1, $2, $3)`,
		AppliedMigrations: `SELECT version, applied_at FROM ` + migrations,
		VersionGuard:      versionGuard,
	}
}

// versionGuard builds a version-guarded write (see sqlset.Meta.VersionGuard):
//
//	UPDATE t SET cols…, version = $v WHERE keys… AND version < $v
//	INSERT INTO t AS cur (…) VALUES (…) ON CONFLICT (keys…) DO UPDATE SET … WHERE cur.version < excluded.version
func versionGuard(w sqlset.VersionedWrite) sqlset.VersionedSQL {
	quote := func(name string) string { return `"` + strings.ReplaceAll(name, ".", `"."`) + `"` }
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
	out := sqlset.VersionedSQL{Current: `SELECT ` + vc + ` FROM ` + table + ` WHERE ` + strings.Join(where, " AND ")}
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
	assign := make([]string, 0, len(set)+1)
	for _, c := range append(append([]string{}, set...), vc) {
		assign = append(assign, c+" = excluded."+c)
	}
	out.Write = `INSERT INTO ` + table + ` AS cur (` + strings.Join(cols, ", ") + `) VALUES (` + strings.Join(vals, ", ") +
		`) ON CONFLICT (` + strings.Join(keys, ", ") + `) DO UPDATE SET ` + strings.Join(assign, ", ") +
		` WHERE cur.` + vc + ` < excluded.` + vc
	return out
}
