package storetest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/dialect/postgres"
	"github.com/idemkit/idem/internal/dialect/sqlite"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/internal/storetest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
	"github.com/idemkit/idem/store/sqlstore"
)

func TestSQLite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Driver[*sql.Tx] { return testdb.SQLite(t) })
}

func TestPgx(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Driver[pgx.Tx] { return testdb.Pgx(t) })
}

func TestSQLPostgres(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Driver[*sql.Tx] { return testdb.SQLPostgres(t) })
}

// A writer waiting longer than its lock timeout gets store.ErrLockTimeout.
func TestLockTimeoutPostgres(t *testing.T) {
	t.Parallel()
	d := testdb.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE lk (k int PRIMARY KEY)`)
	testdb.Exec(t, d, `INSERT INTO lk VALUES (1)`)
	holder, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(ctx, holder)
	if _, err := d.Tx(holder).Exec(ctx, `UPDATE lk SET k = 1 WHERE k = 1`); err != nil {
		t.Fatal(err)
	}
	err = store.InTx(ctx, d, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '50ms'`); err != nil {
			return err
		}
		_, err := d.Tx(tx).Exec(ctx, `UPDATE lk SET k = 1 WHERE k = 1`)
		return err
	})
	if !errors.Is(err, store.ErrLockTimeout) {
		t.Fatalf("got %v, want ErrLockTimeout", err)
	}
}

func TestBusySQLite(t *testing.T) {
	t.Parallel()
	testdb.SkipWithoutSQLite(t)
	path := testdb.SQLitePath(t)
	a, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{BusyTimeout: 50 * time.Millisecond}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	holder, err := a.Begin(ctx) // BEGIN IMMEDIATE takes the write lock now
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(ctx, holder)
	if _, err := b.Begin(ctx); !errors.Is(err, store.ErrLockTimeout) {
		t.Fatalf("second writer: got %v, want ErrLockTimeout", err)
	}
}

// preparer returns the native way to prepare a statement without running
// it: pgx Conn.Prepare on a pooled connection; database/sql PrepareContext,
// inside a transaction (rolled back) on PostgreSQL, on the *sql.DB for
// SQLite.
func preparer(t *testing.T, e testdb.Driver) storetest.Prepare {
	t.Helper()
	switch n := e.Native.(type) {
	case *pgxstore.Driver:
		pool := n.PgxPool()
		return func(ctx context.Context, sql string) error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			_, err = c.Conn().Prepare(ctx, "", sql) // the unnamed statement: nothing to deallocate
			return err
		}
	case *sqlstore.Driver:
		db := n.DB()
		if n.Dialect() == store.SQLite {
			return func(ctx context.Context, sql string) error {
				st, err := db.PrepareContext(ctx, sql)
				if err != nil {
					return err
				}
				return st.Close()
			}
		}
		return func(ctx context.Context, sql string) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			st, err := tx.PrepareContext(ctx, sql)
			if err != nil {
				return err
			}
			return st.Close()
		}
	}
	t.Fatalf("no preparer for %T", e.Native)
	return nil
}

// Every statement idem runs prepares on every driver's migrated database:
// it parses, and every table and column it names exists.
func TestStatements(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		storetest.Complete(t, e.D.Dialect(), e.D.Statements())
		storetest.Statements(t, e.D, preparer(t, e))
	})
}

// The preparers the suite relies on do reject what they must: a missing
// column, a missing table, a syntax error.
func TestPreparersReject(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		prepare := preparer(t, e)
		ctx := context.Background()
		inbox := e.D.Table("inbox")
		if err := prepare(ctx, `SELECT consumer FROM `+inbox+` WHERE message_id = $1`); err != nil {
			t.Fatalf("a valid statement: %v", err)
		}
		for _, bad := range []string{
			`SELECT no_such_column FROM ` + inbox,
			`SELECT 1 FROM ` + e.D.Table("no_such_table"),
			`SELEKT 1`,
		} {
			if err := prepare(ctx, bad); err == nil {
				t.Errorf("%s prepared", bad)
			}
		}
	})
}

// Each dialect's Set has a statement in every field, but the ones
// dialect's NotNeeded lists with a reason.
func TestComplete(t *testing.T) {
	t.Parallel()
	names, err := store.Names{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("postgres", func(t *testing.T) { storetest.Complete(t, store.Postgres, postgres.Statements(names)) })
	t.Run("sqlite", func(t *testing.T) { storetest.Complete(t, store.SQLite, sqlite.Statements(names)) })
	t.Run("arguments", func(t *testing.T) {
		storetest.SameArguments(t, postgres.Statements(names), sqlite.Statements(names))
	})
}

func TestSplit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		sql  string
		want int
	}{
		{`SELECT 1`, 1},
		{`SELECT 1;`, 1},
		{"SELECT 1; -- done\n", 1},
		{`RELEASE SAVEPOINT x; SAVEPOINT x`, 2},
		{`SELECT ';' AS a, "b;c" FROM t WHERE x = 'it''s; fine'`, 1},
		{`SELECT $1 /* ; */ , $2 -- ;` + "\n; SELECT 2", 2},
		{`DO $$ BEGIN PERFORM 1; END $$; SELECT $1`, 2},
		{`DO $fn$ BEGIN PERFORM 1; END $fn$`, 1},
		{`  ;  ; `, 0},
	}
	for _, c := range cases {
		if got := storetest.Split(c.sql); len(got) != c.want {
			t.Errorf("Split(%q) = %q, want %d parts", c.sql, got, c.want)
		}
	}
}

// Migration 0010 rewrote the stored states into the one lease vocabulary
// and the CHECK constraints refuse the old names, so no statement may
// still write or compare them: 'processing' (inbox), 'published' and, on
// the outbox, 'parked' (dead letters keep their own 'parked').
func TestNoRetiredStates(t *testing.T) {
	t.Parallel()
	names, err := store.Names{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for dialect, set := range map[store.Dialect]*sqlset.Set{store.Postgres: postgres.Statements(names), store.SQLite: sqlite.Statements(names)} {
		stmts, err := storetest.Walk(set)
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
					t.Errorf("%s: %s still names the retired state %s\n%s", dialect, st.Name(), old, st.SQL)
				}
			}
		}
	}
}
