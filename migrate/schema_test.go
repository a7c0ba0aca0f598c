package migrate_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/schemadoc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// updateSchema regenerates docs/schema.md's column tables from the
// migrations (go test ./migrate ./store/idemmysql -run TestSchemaReference
// -args -update, with IDEM_TEST_POSTGRES_URL and IDEM_TEST_MYSQL_URL set:
// every dialect; this package writes the SQLite and PostgreSQL sections).
var updateSchema = flag.Bool("update", false, "rewrite docs/schema.md's generated part from the migrated databases")

const schemaDoc = "../docs/schema.md"

type column = schemadoc.Column

// TestSchemaReference checks docs/schema.md against the migrated schema of
// SQLite always and PostgreSQL when IDEM_TEST_POSTGRES_URL is set (the
// idemmysql module checks the MySQL section): each table and column the
// migrations create is documented with its type, and the document names
// none that do not exist.
func TestSchemaReference(t *testing.T) {
	schemadoc.Check(t, schemaDoc, "SQLite", sqliteColumns(t), *updateSchema)
	if os.Getenv(testdb.EnvPostgres) == "" {
		if *updateSchema {
			t.Fatalf("-update needs every dialect: set %s", testdb.EnvPostgres)
		}
		t.Logf("PostgreSQL not checked: %s is not set", testdb.EnvPostgres)
		return
	}
	schemadoc.Check(t, schemaDoc, "PostgreSQL", postgresColumns(t), *updateSchema)
}

func queryColumns[TTx any](t *testing.T, d store.Driver[TTx], sql string, args ...any) []column {
	t.Helper()
	return schemadoc.Query(t, d, sql, args...)
}

func sqliteColumns(t *testing.T) []column {
	d := testdb.SQLite(t)
	prefix := d.Names().Prefix
	cols := queryColumns(t, d, `SELECT substr(m.name, $1), p.name, p.type, CASE WHEN p."notnull" = 1 OR p.pk > 0 THEN 'NOT NULL' ELSE 'NULL' END
		FROM sqlite_master m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND m.name LIKE $2 ESCAPE '\' ORDER BY m.name, p.cid`,
		len(prefix)+1, strings.ReplaceAll(prefix, "_", `\_`)+"%")
	return cols
}

func postgresColumns(t *testing.T) []column {
	d := testdb.Pgx(t)
	return queryColumns(t, d, `SELECT c.table_name::text, c.column_name::text,
			CASE WHEN c.data_type = 'USER-DEFINED' THEN c.udt_name::text ELSE c.data_type::text END,
			CASE WHEN c.is_nullable = 'YES' THEN 'NULL' ELSE 'NOT NULL' END
		FROM information_schema.columns c JOIN information_schema.tables tb
			ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name AND tb.table_type = 'BASE TABLE'
		WHERE c.table_schema = $1 ORDER BY c.table_name, c.ordinal_position`, d.Names().Schema)
}
