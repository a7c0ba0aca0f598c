package pgxstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A reserved transaction whose first statement is an Exec behaves as pgx's
// own transaction afterwards, whether BEGIN travelled in a pgconn batch of
// prepared statements (the default; pgx's transaction is adopted when a
// later call needs it) or in a pgx.Batch (a pool with a tracer): later
// statements, a savepoint rolled back and one released, large objects, a
// Commit of its own; a first statement that fails aborts the transaction
// and one that cannot be prepared closes it, so EndReserved commits
// nothing in either case.
func TestReservedAdoptedTransaction(t *testing.T) {
	for _, traced := range []bool{false, true} {
		name := map[bool]string{false: "pgconn", true: "traced"}[traced]
		t.Run(name, func(t *testing.T) {
			tracer := &batchCounter{}
			var configure []func(*pgxpool.Config)
			if traced {
				configure = append(configure, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
			}
			d, _ := pgproxy.Pgx(t, configure...)
			ctx := context.Background()
			testdb.Exec(t, d, `CREATE TABLE ad (k text PRIMARY KEY)`)
			const ins = `INSERT INTO ad (k) VALUES ($1)`
			begin := func() pgx.Tx {
				t.Helper()
				tx, ok, err := d.BeginReserved(ctx, nil)
				if err != nil || !ok {
					t.Fatalf("BeginReserved ok %v err %v", ok, err)
				}
				// A failed check must not leave the connection holding
				// the table's locks, or the cleanup's DROP waits forever.
				t.Cleanup(func() { _ = d.EndReserved(ctx, tx, false, nil, nil) })
				return tx
			}
			has := func(k string) bool {
				t.Helper()
				return testdb.Count(t, d, `SELECT count(*) FROM ad WHERE k = $1`, k) == 1
			}

			// Later statements, savepoints and large objects, committed
			// by EndReserved.
			tx := begin()
			if tag, err := tx.Exec(ctx, ins, "first"); err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("first Exec: %v, %v", tag, err)
			}
			if _, err := tx.Exec(ctx, ins, "second"); err != nil {
				t.Fatal(err)
			}
			sp, err := tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sp.Exec(ctx, ins, "rolled-back"); err != nil {
				t.Fatal(err)
			}
			if err := sp.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			sp, err = tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sp.Exec(ctx, ins, "released"); err != nil {
				t.Fatal(err)
			}
			if err := sp.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			lo := tx.LargeObjects()
			oid, err := lo.Create(ctx, 0)
			if err != nil {
				t.Fatalf("large object in the adopted transaction: %v", err)
			}
			var k string
			if err := tx.QueryRow(ctx, `SELECT k FROM ad WHERE k = 'first'`).Scan(&k); err != nil {
				t.Fatalf("the transaction does not see its first statement: %v", err)
			}
			if err := d.EndReserved(ctx, tx, true, nil, nil); err != nil {
				t.Fatal(err)
			}
			for k, want := range map[string]bool{"first": true, "second": true, "released": true, "rolled-back": false} {
				if has(k) != want {
					t.Errorf("%q committed: %v, want %v", k, !want, want)
				}
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1`, oid); n != 1 {
				t.Errorf("large object %d committed: %d rows", oid, n)
			}

			// The transaction's own Commit after a single Exec: committed,
			// and EndReserved then refuses to commit again.
			tx = begin()
			if _, err := tx.Exec(ctx, ins, "self-committed"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := d.EndReserved(ctx, tx, true, nil, nil); !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatalf("EndReserved after the transaction's own Commit: %v, want ErrTxClosed", err)
			}
			if !has("self-committed") {
				t.Error("the transaction's own Commit did not commit")
			}

			// A first statement that fails aborts the transaction: nothing
			// of it or of EndReserved's statements commits.
			tx = begin()
			_, err = tx.Exec(ctx, ins, "first")
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "23505" {
				t.Fatalf("duplicate first Exec: %v, want a unique violation", err)
			}
			if err := d.EndReserved(ctx, tx, true, []store.Stmt{{SQL: ins, Args: []any{"after-abort"}}}, nil); !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("EndReserved of an aborted transaction: %v, want ErrTxCommitRollback", err)
			}
			if has("after-abort") {
				t.Error("EndReserved committed after a failed first statement")
			}

			// A first statement the server cannot prepare: BEGIN never ran,
			// the transaction is closed, nothing runs outside it.
			tx = begin()
			if _, err := tx.Exec(ctx, `INSERT INTO ad_missing (k) VALUES ($1)`, "x"); err == nil {
				t.Fatal("an INSERT into a missing table succeeded")
			}
			if _, err := tx.Exec(ctx, ins, "outside"); !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatalf("a statement after a first one that was never begun: %v, want ErrTxClosed", err)
			}
			if err := d.EndReserved(ctx, tx, true, []store.Stmt{{SQL: ins, Args: []any{"after-closed"}}}, nil); err == nil {
				t.Fatal("EndReserved committed a transaction that never began")
			}
			if has("outside") || has("after-closed") {
				t.Error("a statement ran outside the transaction")
			}
			if traced && tracer.n.Load() == 0 {
				t.Fatal("the traced pool saw no batch")
			}
		})
	}
}
