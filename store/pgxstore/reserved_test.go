package pgxstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// The reserved transaction's round trips, on a connection that has
// prepared its statements: the setup statements one, the first statement
// of the transaction one (BEGIN travels with it, for Exec, Query and
// QueryRow alike), EndReserved one (the closing statement, COMMIT and the
// after statements together), and a transaction never used none at all.
// A session-level advisory lock taken by the setup statements lasts until
// the after statements release it, and values travel as bound parameters.
func TestRoundTripsReserved(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE rs (k text PRIMARY KEY, v text NOT NULL DEFAULT '')`)
	const (
		lock   = `SELECT pg_advisory_lock($1::bigint)`
		unlock = `SELECT pg_advisory_unlock($1::bigint)`
		ins    = `INSERT INTO rs (k) VALUES ($1)`
		upd    = `UPDATE rs SET v = $2 WHERE k = $1`
		held   = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`
	)
	locks := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) int64 {
		t.Helper()
		var n int64
		if err := q.QueryRow(ctx, held).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	type first func(tx pgx.Tx, k string) error
	firsts := map[string]first{
		"Exec": func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, ins, k); return err },
		"Query": func(tx pgx.Tx, k string) error {
			rows, err := tx.Query(ctx, ins+` RETURNING k`, k)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			rows.Close()
			return rows.Err()
		},
		"QueryRow": func(tx pgx.Tx, k string) error {
			var got string
			return tx.QueryRow(ctx, ins+` RETURNING k`, k).Scan(&got)
		},
	}
	run := func(name, k string, f first) (setup, stmt, end int) {
		t.Helper()
		p.Reset()
		tx, ok, err := d.BeginReserved(ctx, []store.Stmt{{SQL: lock, Args: []any{int64(42)}}})
		if err != nil || !ok {
			t.Fatalf("%s: BeginReserved ok %v err %v", name, ok, err)
		}
		setup = p.RoundTrips()
		p.Reset()
		if err := f(tx, k); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		stmt = p.RoundTrips()
		if n := locks(tx); n != 1 {
			t.Fatalf("%s: %d advisory locks held in the transaction, want 1", name, n)
		}
		p.Reset()
		err = d.EndReserved(ctx, tx, true, []store.Stmt{{SQL: upd, Args: []any{k, k}}}, []store.Stmt{{SQL: unlock, Args: []any{int64(42)}}})
		if err != nil {
			t.Fatalf("%s: EndReserved: %v", name, err)
		}
		end = p.RoundTrips()
		if k != "warm-"+name {
			requireBound(t, p, "", k)
		}
		return setup, stmt, end
	}
	for name, f := range firsts {
		run(name, "warm-"+name, f) // prepares the statements on the connection
		setup, stmt, end := run(name, hostile+name, f)
		if setup != 1 || stmt != 1 || end != 1 {
			t.Fatalf("%s: round trips setup %d, first statement %d, end %d; want 1, 1, 1", name, setup, stmt, end)
		}
		var v string
		if err := d.PgxPool().QueryRow(ctx, `SELECT v FROM rs WHERE k = $1`, hostile+name).Scan(&v); err != nil || v != hostile+name {
			t.Fatalf("%s: stored %q (%v)", name, v, err)
		}
		if n := locks(d.PgxPool()); n != 0 {
			t.Fatalf("%s: %d advisory locks left on the pooled connection", name, n)
		}
	}

	// Unused: the setup statements' round trip and nothing else (the lock
	// released by the setup itself, as a replay does).
	for range 2 {
		p.Reset()
		tx, ok, err := d.BeginReserved(ctx, []store.Stmt{{SQL: lock, Args: []any{int64(7)}}, {SQL: unlock, Args: []any{int64(7)}}})
		if err != nil || !ok {
			t.Fatalf("BeginReserved ok %v err %v", ok, err)
		}
		if err := d.EndReserved(ctx, tx, false, nil, nil); err != nil {
			t.Fatal(err)
		}
		if n := p.RoundTrips(); n != 1 {
			t.Fatalf("unused reserved transaction: %d round trips, want 1", n)
		}
	}

	// A transaction the handler ended itself cannot commit; the
	// connection is closed (the pool has one: the next call proves it
	// was replaced, not leaked) and the lock is gone with it.
	tx, ok, err := d.BeginReserved(ctx, []store.Stmt{{SQL: lock, Args: []any{int64(9)}}})
	if err != nil || !ok {
		t.Fatalf("BeginReserved ok %v err %v", ok, err)
	}
	if _, err := tx.Exec(ctx, ins, "self-rolled-back"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.EndReserved(ctx, tx, true, []store.Stmt{{SQL: upd, Args: []any{"self-rolled-back", "x"}}}, nil); err == nil {
		t.Fatal("EndReserved committed a transaction that had rolled itself back")
	}
	if n := locks(d.PgxPool()); n != 0 {
		t.Fatalf("%d advisory locks survived a failed EndReserved", n)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM rs WHERE k = 'self-rolled-back'`); n != 0 {
		t.Fatal("the rolled back statement committed")
	}
}
