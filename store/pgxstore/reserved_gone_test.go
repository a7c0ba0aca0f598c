package pgxstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// What a reserved transaction handed out (a savepoint, its large objects,
// a savepoint of a savepoint) stops working once EndReserved has returned
// the connection to the pool, whether the transaction was begun by its
// first statement (pgx's transaction adopted later) or by the savepoint or
// the large objects themselves: on a pool of one connection the next
// reserved transaction gets that same connection, and a statement through
// the old savepoint must fail with pgx.ErrTxClosed instead of running inside
// the new transaction.
func TestReservedEndClosesWhatItHandedOut(t *testing.T) {
	bothPaths(t, func(t *testing.T, traced bool, _ *batchCounter, d *pgxstore.Driver, _ *pgproxy.Proxy) {
		ctx := context.Background()
		testdb.Exec(t, d, `CREATE TABLE eg (k text PRIMARY KEY)`)
		const ins = `INSERT INTO eg (k) VALUES ($1)`
		has := func(k string) bool {
			t.Helper()
			return testdb.Count(t, d, `SELECT count(*) FROM eg WHERE k = $1`, k) == 1
		}
		begin := func() pgx.Tx {
			t.Helper()
			tx, ok, err := d.BeginReserved(ctx, nil)
			if err != nil || !ok {
				t.Fatalf("BeginReserved ok %v err %v", ok, err)
			}
			t.Cleanup(func() { _ = d.EndReserved(ctx, tx, false, nil, nil) })
			return tx
		}
		// next runs a second reserved transaction on the pool's one
		// connection: its first statement, then f (the stale handle's
		// attempt), then its commit.
		next := func(name string, f func() error) {
			t.Helper()
			tx2 := begin()
			if _, err := tx2.Exec(ctx, ins, name+"-second"); err != nil {
				t.Fatalf("%s: the second transaction's first statement: %v", name, err)
			}
			if err := f(); !errors.Is(err, pgx.ErrTxClosed) {
				t.Errorf("%s: a statement through the first transaction's handle after EndReserved: %v, want pgx.ErrTxClosed", name, err)
			}
			if err := d.EndReserved(ctx, tx2, true, nil, nil); err != nil {
				// The stale handle's statement broke the second
				// transaction (the failure reported above).
				t.Errorf("%s: the second transaction: %v", name, err)
				return
			}
			if has(name + "-stale") {
				t.Errorf("%s: the stale handle's INSERT committed with the second transaction", name)
			}
			if !has(name + "-second") {
				t.Errorf("%s: the second transaction did not commit", name)
			}
		}

		for _, commit := range []bool{true, false} {
			end := map[bool]string{true: "commit", false: "rollback"}[commit]

			// A savepoint taken after a first Exec (pgx's transaction
			// adopted), and one of that savepoint.
			name := "savepoint-" + end
			tx := begin()
			if _, err := tx.Exec(ctx, ins, name+"-first"); err != nil {
				t.Fatal(err)
			}
			sp, err := tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			spsp, err := sp.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := spsp.Exec(ctx, ins, name+"-inner"); err != nil {
				t.Fatal(err)
			}
			if err := spsp.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := d.EndReserved(ctx, tx, commit, nil, nil); err != nil {
				t.Fatal(err)
			}
			if has(name+"-first") != commit || has(name+"-inner") != commit {
				t.Errorf("%s: committed first %v, inner %v; want %v", name, has(name+"-first"), has(name+"-inner"), commit)
			}
			next(name, func() error { _, err := sp.Exec(ctx, ins, name+"-stale"); return err })
			next(name+"-rollback", func() error { return sp.Rollback(ctx) })
			next(name+"-begin", func() error { _, err := sp.Begin(ctx); return err })
			next(name+"-query", func() error {
				var k string
				return sp.QueryRow(ctx, ins+` RETURNING k`, name+"-query-stale").Scan(&k)
			})

			// A savepoint that begins the transaction itself.
			name = "savepoint-first-" + end
			tx = begin()
			sp, err = tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sp.Exec(ctx, ins, name+"-first"); err != nil {
				t.Fatal(err)
			}
			if err := d.EndReserved(ctx, tx, commit, nil, nil); err != nil {
				t.Fatal(err)
			}
			if has(name+"-first") != commit {
				t.Errorf("%s: committed %v, want %v", name, has(name+"-first"), commit)
			}
			next(name, func() error { _, err := sp.Exec(ctx, ins, name+"-stale"); return err })

			// Large objects after a first Exec, and large objects that
			// begin the transaction.
			for _, first := range []bool{true, false} {
				name = "lo-" + end + map[bool]string{true: "-after-exec", false: "-first"}[first]
				tx = begin()
				if first {
					if _, err := tx.Exec(ctx, ins, name+"-first"); err != nil {
						t.Fatal(err)
					}
				}
				lo := tx.LargeObjects()
				oid, err := lo.Create(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				// EndReserved's statements still run where they belong:
				// before in the transaction, after outside it.
				before := []store.Stmt{{SQL: ins, Args: []any{name + "-before"}}}
				after := []store.Stmt{{SQL: ins, Args: []any{name + "-after"}}}
				if err := d.EndReserved(ctx, tx, commit, before, after); err != nil {
					t.Fatal(err)
				}
				if has(name+"-before") != commit || !has(name+"-after") {
					t.Errorf("%s: committed before %v (want %v), after %v (want true)", name, has(name+"-before"), commit, has(name+"-after"))
				}
				if n := testdb.Count(t, d, `SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1`, oid); (n == 1) != commit {
					t.Errorf("%s: large object committed %v, want %v", name, n == 1, commit)
				}
				if first && has(name+"-first") != commit {
					t.Errorf("%s: first statement committed %v, want %v", name, has(name+"-first"), commit)
				}
				var stale uint32
				next(name, func() error {
					var err error
					stale, err = lo.Create(ctx, 0)
					return err
				})
				if stale != 0 {
					if n := testdb.Count(t, d, `SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1`, stale); n != 0 {
						t.Errorf("%s: the stale handle's large object %d committed with the second transaction", name, stale)
					}
				}
			}
		}
	})
}
