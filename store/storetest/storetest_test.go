package storetest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
	"github.com/idemkit/idem/store/storetest"
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
	path := testdb.SQLitePath(t)
	a, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteOptions{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteOptions{BusyTimeout: 50 * time.Millisecond}, sqlstore.Config{})
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
