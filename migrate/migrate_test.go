package migrate_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"
)

func TestMigrationsParse(t *testing.T) {
	for _, d := range []store.Dialect{store.Postgres, store.SQLite} {
		pg, err := migrate.Migrations(d, store.Names{Schema: "idem", Prefix: "idem_"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pg) == 0 || pg[0].Version != 1 {
			t.Fatalf("%s: want migrations starting at 1, got %v", d, pg)
		}
	}
	pg, _ := migrate.Migrations(store.Postgres, store.Names{Schema: "idem"})
	sq, _ := migrate.Migrations(store.SQLite, store.Names{Prefix: "idem_"})
	if len(pg) != len(sq) {
		t.Fatalf("postgres has %d migrations, sqlite %d: every part needs both", len(pg), len(sq))
	}
	for i := range pg {
		if pg[i].Version != sq[i].Version || pg[i].Name != sq[i].Name {
			t.Errorf("migration %d: postgres %04d_%s vs sqlite %04d_%s", i, pg[i].Version, pg[i].Name, sq[i].Version, sq[i].Name)
		}
	}
}

func TestUpStatus(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		d := e.D
		ctx := context.Background()
		m := migrate.New(d)
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if !s.Applied || s.AppliedAt.IsZero() {
				t.Errorf("migration %04d_%s not applied", s.Version, s.Name)
			}
		}
		again, err := m.Up(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != 0 {
			t.Fatalf("second Up applied %d migrations, want 0", len(again))
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")); n != 0 {
			t.Fatalf("inbox has %d rows", n)
		}
	})
}

// Concurrent migrators on one fresh schema: exactly one applies each migration.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	pool, schema := testdb.PgxPool(t)
	ctx := context.Background()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema + "_idem"}})
			if err == nil {
				_, err = migrate.New(d).Up(ctx)
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `DROP SCHEMA `+schema+`_idem CASCADE`) })
	d, _ := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema + "_idem"}})
	all, _ := migrate.Migrations(store.Postgres, d.Names())
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("migrations")); n != len(all) {
		t.Fatalf("%d migration rows, want %d", n, len(all))
	}
}

func TestBadNames(t *testing.T) {
	if _, err := sqlstore.OpenSQLite(testdb.SQLitePath(t), sqlstore.SQLiteConfig{}, sqlstore.Config{Names: store.Names{Prefix: "bad-prefix"}}); err == nil {
		t.Fatal("want an error for a prefix that is not an identifier")
	}
}
