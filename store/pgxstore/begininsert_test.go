package pgxstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/idemkit/idem/internal/testdb"
)

// BeginInsert renders arguments as literals: awkward strings and bytes must
// arrive unchanged, and a duplicate must come back as inserted=false with
// the connection usable.
func TestBeginInsertRoundTrip(t *testing.T) {
	t.Parallel()
	d := testdb.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE bi (k text PRIMARY KEY, b bytea NOT NULL, n bigint NOT NULL)`)
	keys := []string{`plain`, `it's`, `back\slash`, `$1 $2`, `ünïcode 😀`, `'; DROP TABLE bi; --`, `\x00`}
	for i, k := range keys {
		blob := []byte{0, 1, 2, '\'', '\\', byte(i)}
		tx, inserted, ok, err := d.BeginInsert(ctx, `INSERT INTO bi (k, b, n) VALUES ($1, $2, $3)`, k, blob, int64(-i))
		if err != nil || !ok || !inserted {
			t.Fatalf("%q: inserted=%v ok=%v err=%v", k, inserted, ok, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var gotB []byte
		var gotN int64
		if err := d.PgxPool().QueryRow(ctx, `SELECT b, n FROM bi WHERE k = $1`, k).Scan(&gotB, &gotN); err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		if !bytes.Equal(gotB, blob) || gotN != int64(-i) {
			t.Fatalf("%q: got %v %d", k, gotB, gotN)
		}
		// The same key again: a unique violation, reported, not raised.
		_, inserted, ok, err = d.BeginInsert(ctx, `INSERT INTO bi (k, b, n) VALUES ($1, $2, $3)`, k, blob, int64(0))
		if err != nil || !ok || inserted {
			t.Fatalf("%q duplicate: inserted=%v ok=%v err=%v", k, inserted, ok, err)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM bi`); n != len(keys) {
		t.Fatalf("%d rows, want %d", n, len(keys))
	}
	// Unsupported argument types are declined, not guessed.
	if _, _, ok, err := d.BeginInsert(ctx, `INSERT INTO bi (k, b, n) VALUES ($1, $2, $3)`, 1.5, []byte{}, int64(0)); ok || err != nil {
		t.Fatalf("float argument: ok=%v err=%v, want declined", ok, err)
	}
	// Every connection went back to the pool idle.
	st := d.PgxPool().Stat()
	if st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", st.AcquiredConns())
	}
}

// ExecCommit ends a BeginInsert transaction with one round trip: committed
// on success, rolled back (nothing visible) when COMMIT fails, and declined
// for transactions it did not begin.
func TestExecCommit(t *testing.T) {
	t.Parallel()
	d := testdb.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE ec (k text PRIMARY KEY, v text NOT NULL)`)
	testdb.Exec(t, d, `CREATE TABLE ec_ref (k text NOT NULL REFERENCES ec (k) DEFERRABLE INITIALLY DEFERRED)`)

	tx, inserted, ok, err := d.BeginInsert(ctx, `INSERT INTO ec (k, v) VALUES ($1, $2)`, "a", "pending")
	if err != nil || !ok || !inserted {
		t.Fatal(inserted, ok, err)
	}
	done, err := d.ExecCommit(ctx, tx, `UPDATE ec SET v = $2 WHERE k = $1`, "a", "it's done")
	if !done || err != nil {
		t.Fatalf("ExecCommit: %v %v", done, err)
	}
	var v string
	if err := d.PgxPool().QueryRow(ctx, `SELECT v FROM ec WHERE k = 'a'`).Scan(&v); err != nil || v != "it's done" {
		t.Fatalf("after commit: %q %v", v, err)
	}
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatalf("rollback after ExecCommit must be a no-op: %v", err)
	}

	// A COMMIT that fails (deferred foreign key) leaves nothing behind.
	tx, _, _, err = d.BeginInsert(ctx, `INSERT INTO ec (k, v) VALUES ($1, $2)`, "b", "pending")
	if err != nil {
		t.Fatal(err)
	}
	done, err = d.ExecCommit(ctx, tx, `INSERT INTO ec_ref (k) VALUES ($1)`, "missing")
	if !done || err == nil {
		t.Fatalf("failing commit: done=%v err=%v, want an error", done, err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM ec WHERE k = 'b'`); n != 0 {
		t.Fatal("a failed commit left its insert")
	}

	// Not a BeginInsert transaction: declined, nothing done.
	plain, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := d.ExecCommit(ctx, plain, `UPDATE ec SET v = 'x'`); done || err != nil {
		t.Fatalf("plain tx: done=%v err=%v, want declined", done, err)
	}
	if err := d.Rollback(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if st := d.PgxPool().Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", st.AcquiredConns())
	}
}
