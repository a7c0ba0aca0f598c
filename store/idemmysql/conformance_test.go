package idemmysql_test

import (
	"context"
	"database/sql"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/schemadoc"
	"github.com/idemkit/idem/internal/storetest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// The store conformance suite on MySQL/MariaDB: every driver behaviour
// idem's packages rely on (translations of unique violations, lock
// timeouts, transactions, statements).
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Driver[*sql.Tx] { return idemmysqltest.Open(t) })
}

// Every statement idem runs prepares on a migrated MySQL database, and
// the dialect's statement set is complete.
func TestStatements(t *testing.T) {
	t.Parallel()
	d := idemmysqltest.Open(t)
	storetest.Complete(t, d.Dialect(), d.Statements())
	storetest.Statements(t, d, d.Prepare)
}

// No statement writes or compares the states migration 0010 retired.
func TestNoRetiredStates(t *testing.T) {
	t.Parallel()
	names, err := store.Names{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	stmts, err := storetest.Walk(idemmysql.Statements(names))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stmts {
		retired := []string{`'processing'`, `'published'`}
		if strings.HasPrefix(st.Field, "Outbox.") {
			retired = append(retired, `'parked'`)
		}
		for _, old := range retired {
			if strings.Contains(st.SQL, old) {
				t.Errorf("%s still names the retired state %s\n%s", st.Name(), old, st.SQL)
			}
		}
	}
}

// A URL asking for a non-strict sql_mode is refused or overridden: the
// middleware's long scopes are stored or refused as client input, never a
// 5xx from a truncated column.
func TestNonStrictURLStillStrict(t *testing.T) {
	t.Parallel()
	d, err := idemmysql.Open(context.Background(), idemmysqltest.Database(t)+"?sql_mode=%27%27", idemmysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := migrate.Up(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for i, key := range []string{strings.Repeat("k", 255), strings.Repeat("k", 100000)} {
		r, _ := http.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		r.Header.Set(idemhttp.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("key %d (%d bytes): %d, a store failure for client input", i, len(key), w.Code)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("idempotency_keys")); n != 1 {
		t.Fatalf("%d key records, want 1 (the long key refused before the store)", n)
	}
}

// updateSchema regenerates docs/schema.md's MySQL section (see package
// migrate's TestSchemaReference for the other dialects).
var updateSchema = flag.Bool("update", false, "rewrite docs/schema.md's MySQL section from a migrated database")

// TestSchemaReference checks docs/schema.md's MySQL section against a
// migrated MySQL/MariaDB database.
func TestSchemaReference(t *testing.T) {
	d := idemmysqltest.Open(t)
	cols := schemadoc.Query(t, d, `SELECT CAST(table_name AS CHAR), CAST(column_name AS CHAR), CAST(column_type AS CHAR),
			CASE WHEN is_nullable = 'YES' THEN 'NULL' ELSE 'NOT NULL' END
		FROM information_schema.columns WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position`)
	for i := range cols {
		cols[i].Table = strings.TrimPrefix(cols[i].Table, d.Names().Prefix)
	}
	schemadoc.Check(t, "../../docs/schema.md", "MySQL", cols, *updateSchema)
}
