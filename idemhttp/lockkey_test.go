package idemhttp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/internal/testdb"
)

// HTTPKeys.LockKey on PostgreSQL takes the key's session lock and then
// reads; when the read fails after the lock was taken (here it waits on
// a table another session locked, until lock_timeout or
// statement_timeout), the statement releases the lock before failing, so
// a failed call leaves no session lock for the connection to carry back
// to the pool.
func TestLockKeyFailedReadReleasesLockPgx(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	lockKey := d.Statements().HTTPKeys.LockKey
	// Warm-up: the statement's result type (the table's row type) is
	// cached by the session, so the calls below wait on the table inside
	// the function's read, after the advisory lock, not before it.
	rows, err := conn.Query(ctx, lockKey, "acme", "POST /orders", "k", int64(42), "100ms")
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock_all()`); err != nil {
		t.Fatal(err)
	}
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Rollback(ctx, tx) }()
	if _, err := d.Tx(tx).Exec(ctx, `LOCK TABLE `+d.Table("idempotency_keys")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ setting, code string }{
		{`SET lock_timeout = '100ms'`, "55P03"},
		{`SET lock_timeout = 0; SET statement_timeout = '100ms'`, "57014"},
	} {
		if _, err := conn.Exec(ctx, c.setting); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, lockKey, "acme", "POST /orders", "k", int64(42), "100ms")
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code || !strings.Contains(pgErr.Where, "RETURN QUERY") {
			t.Fatalf("%s: error %v, want SQLSTATE %s in the function's read", c.setting, err, c.code)
		}
		var held int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held != 0 {
			t.Fatalf("%s: %d advisory locks still held after the failed read", c.setting, held)
		}
	}
}
