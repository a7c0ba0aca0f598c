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

// HTTPKeys.LockKey on PostgreSQL reads, and takes the key's session lock
// only when there is no record; when a read fails (here it waits on a
// table another session locked, until lock_timeout or statement_timeout),
// the call leaves no session lock for the connection to carry back to the
// pool: it failed before taking the lock, or released it before failing.
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
		// The call can also wait on the locked table outside the
		// function's read: before the body runs, when the session reloads
		// the table's row type for the call's result (after a cache reset,
		// which other tests' DDL on the same server can cause), or while
		// the function is looked up or compiled. No lock is left then
		// either (checked above on every attempt), and the call is tried
		// again.
		for attempt := 1; ; attempt++ {
			rows, err := conn.Query(ctx, lockKey, "acme", "POST /orders", "k", int64(42), "100ms")
			if err == nil {
				for rows.Next() {
				}
				rows.Close()
				err = rows.Err()
			}
			var held int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&held); err != nil {
				t.Fatal(err)
			}
			if held != 0 {
				t.Fatalf("%s: %d advisory locks still held after the failed call (%v)", c.setting, held, err)
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == c.code && strings.Contains(pgErr.Where, "RETURN QUERY") {
				break // failed in the function's read, and left no lock
			}
			if errors.As(err, &pgErr) && pgErr.Code == c.code && attempt < 5 {
				t.Logf("%s: attempt %d failed outside the function's read (where: %q); trying again", c.setting, attempt, pgErr.Where)
				continue
			}
			where := ""
			if pgErr != nil {
				where = pgErr.Where
			}
			t.Fatalf("%s: error %v (where: %q), want SQLSTATE %s in the function's read", c.setting, err, where, c.code)
		}
	}
}

// A replay takes no lock (migration 0014): LockKey returns an existing
// record without waiting for the key's advisory lock, even while another
// session holds it, and leaves no lock held.
func TestLockKeyReplayTakesNoLockPgx(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	conn, err := pgx.Connect(ctx, testdb.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	testdb.Exec(t, d, `INSERT INTO `+d.Table("idempotency_keys")+` (tenant, operation, idem_key, fingerprint, state, token, status, created_at, locked_until, expires_at)
		VALUES ('acme', 'POST /orders', 'done', '\x00', 'completed', 1, 201, 0, 0, 9e15)`)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(42)`); err != nil {
		t.Fatal(err)
	}
	lockKey := d.Statements().HTTPKeys.LockKey
	rows, err := conn.Query(ctx, lockKey, "acme", "POST /orders", "done", int64(42), "100ms")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatalf("replay read while the key's lock is held elsewhere: %v", err)
	}
	if n != 1 {
		t.Fatalf("replay read returned %d records, want 1", n)
	}
	var held int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d advisory locks held after a replay read", held)
	}
	// A key with no record still waits for the lock, and gives up at the timeout.
	rows, err = conn.Query(ctx, lockKey, "acme", "POST /orders", "new", int64(42), "100ms")
	if err == nil {
		for rows.Next() {
		}
		rows.Close()
		err = rows.Err()
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("new key while its lock is held elsewhere: %v, want lock_timeout (55P03)", err)
	}
}
