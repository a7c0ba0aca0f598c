package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// The HTTP key statements run prepared on SQLite: before the migrations
// they fail as the unprepared statement would (no such table) and nothing
// is kept; afterwards they read and write on the pool and in transactions,
// and a rolled-back transaction's INSERT leaves nothing.
func TestPreparedHTTPKeyStatements(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	ctx := context.Background()
	d, err := sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "p.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	q := d.Statements().HTTPKeys
	scope := []any{"t", "POST /o", "k"}
	var token int64
	if err := d.Pool().QueryRow(ctx, q.Load, scope...).Scan(&token); err == nil || errors.Is(err, store.ErrNoRows) {
		t.Fatalf("Load before the migrations: %v, want a missing-table error", err)
	}
	if err := migrate.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	insert := func(tx *sql.Tx, key string) error {
		_, err := d.Tx(tx).Exec(ctx, q.InsertCompleted, "t", "POST /o", key, make([]byte, 32), 201, `{}`, []byte(`{}`), 0, "", "", int64(1), int64(2), int64(1<<60))
		return err
	}
	for i, commit := range []bool{false, true, true} {
		tx, err := d.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = insert(tx, "k")
		if i == 2 {
			if !errors.Is(err, store.ErrUniqueViolation) {
				t.Fatalf("second INSERT of a key: %v, want ErrUniqueViolation", err)
			}
			_ = d.Rollback(ctx, tx)
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := d.Tx(tx).QueryRow(ctx, q.Load, scope...).Scan(new([]byte), new(string), &n, new(int64), new(string), new([]byte),
			new(int64), new(string), new(string), new(int64), new(int64), new(int64), new(int64)); err != nil {
			t.Fatalf("Load in the transaction: %v", err)
		}
		if commit {
			err = d.Commit(ctx, tx)
		} else {
			err = d.Rollback(ctx, tx)
		}
		if err != nil {
			t.Fatal(err)
		}
		err = d.Pool().QueryRow(ctx, q.Load, scope...).Scan(new([]byte), new(string), &n, new(int64), new(string), new([]byte),
			new(int64), new(string), new(string), new(int64), new(int64), new(int64), new(int64))
		if commit != (err == nil) || !commit && !errors.Is(err, store.ErrNoRows) {
			t.Fatalf("Load on the pool after commit=%v: %v", commit, err)
		}
	}
}

// A statement of the set first run inside a transaction, with every
// connection of the pool taken, runs unprepared at once: preparing it
// would wait for a connection the transaction itself holds (before, the
// soak's first requests stalled until SQLite's busy timeout).
func TestPreparedNeverWaitsForAConnectionInATransaction(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	ctx := context.Background()
	d, err := sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "p.db"), sqlstore.SQLiteConfig{MaxOpenConns: 1}, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	q := d.Statements().HTTPKeys
	tx, err := d.Begin(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.Tx(tx).Exec(ctx, q.InsertCompleted, "t", "POST /o", "k", make([]byte, 32), 201, `{}`, []byte(`{}`), 0, "", "", int64(1), int64(2), int64(1<<60))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first InsertCompleted in a transaction waited 10s for a second connection of a one-connection pool")
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
}

// The driver classifies errors of a caller's own statements on its
// transactions (store.ErrorTranslator), as idem's batches need.
var _ store.ErrorTranslator = (*sqlstore.Driver)(nil)
