package bench

import (
	"context"
	"os"
	"testing"

	"github.com/idemkit/idem/cmd/idem/internal/dsn"
)

// TestOpenPostgresSchema: Open creates the run's schema on PostgreSQL and
// a migrated pgx driver on it (search_path pointing there); Close drops
// the schema again. No benchmark runs.
func TestOpenPostgresSchema(t *testing.T) {
	pg := os.Getenv("IDEM_TEST_POSTGRES_URL")
	if pg == "" {
		t.Skip("IDEM_TEST_POSTGRES_URL not set")
	}
	ctx := context.Background()
	e, err := Open(ctx, Config{Postgres: pg, SQLiteDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	schema := e.Schema()
	count := func() int {
		t.Helper()
		d, err := dsn.Open(ctx, pg, dsn.Options{MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		var n int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !e.hasPostgres() || count() != 1 {
		_ = e.Close()
		t.Fatalf("schema %q: postgres %v, want it created", schema, e.hasPostgres())
	}
	var path string
	if err := e.pg.Pool().QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&path); err != nil || path != schema {
		t.Errorf("search_path %q (%v), want %q", path, err, schema)
	}
	var migrated int
	if err := e.pg.Pool().QueryRow(ctx, `SELECT count(*) FROM `+e.pg.Table("inbox")).Scan(&migrated); err != nil {
		t.Errorf("the run's inbox table: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("schema %q still exists after Close", schema)
	}
}
