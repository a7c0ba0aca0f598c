package pgxstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// A reserved transaction whose first statement is an Exec behaves as pgx's
// own transaction afterwards, whether BEGIN travelled in a pgconn batch of
// prepared statements (the default; pgx's transaction is adopted, without
// a round trip, when a later call needs it) or in a pgx.Batch (a pool with
// a tracer): later statements, a savepoint rolled back and one released,
// large objects, a Commit of its own, EndReserved committing or rolling
// back the first statement alone; a first statement that fails aborts the
// transaction and one that cannot be prepared closes it, so EndReserved
// commits nothing in either case.
func TestReservedAdoptedTransaction(t *testing.T) {
	bothPaths(t, func(t *testing.T, traced bool, tracer *batchCounter, d *pgxstore.Driver, p *pgproxy.Proxy) {
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

		// A transaction rolled back, so that pgx's statement cache
		// knows ins on the connection before the round trips are
		// counted.
		tx := begin()
		for _, k := range []string{"warm-1", "warm-2"} {
			if _, err := tx.Exec(ctx, ins, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.EndReserved(ctx, tx, false, nil, nil); err != nil {
			t.Fatal(err)
		}

		// Later statements, savepoints and large objects, committed
		// by EndReserved.
		tx = begin()
		p.Reset()
		if tag, err := tx.Exec(ctx, ins, "first"); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("first Exec: %v, %v", tag, err)
		}
		if got := boundIdemName(p); got != !traced {
			t.Fatalf("first Exec bound a statement of idem's name: %v, want %v", got, !traced)
		}
		// The statement after the first is one round trip: adopting
		// pgx's transaction sends nothing.
		p.Reset()
		if _, err := tx.Exec(ctx, ins, "second"); err != nil {
			t.Fatal(err)
		}
		if n := p.RoundTrips(); n != 1 {
			t.Fatalf("the second statement took %d round trips, want 1", n)
		}
		// The first statement went as a handler's statement prepared
		// by idem's name on the pgconn path, through pgx's statement
		// cache on the traced one.
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'idem\_h\_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int64{false: 1, true: 0}[traced]; n != want {
			t.Fatalf("%d handler statements prepared by idem's name on the connection, want %d", n, want)
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

		// A first QueryRow (INSERT … RETURNING): its row, then the
		// transaction as after a first Exec (on the connection whose
		// pgx statement cache knows ins: before a test below closes it).
		tx = begin()
		var got string
		p.Reset()
		if err := tx.QueryRow(ctx, ins+` RETURNING k`, "q-first").Scan(&got); err != nil || got != "q-first" {
			t.Fatalf("first QueryRow: %q, %v", got, err)
		}
		if got := boundIdemName(p); got != !traced {
			t.Fatalf("first QueryRow bound a statement of idem's name: %v, want %v", got, !traced)
		}
		p.Reset()
		if _, err := tx.Exec(ctx, ins, "q-second"); err != nil {
			t.Fatal(err)
		}
		if n := p.RoundTrips(); n != 1 {
			t.Fatalf("the statement after a first QueryRow took %d round trips, want 1", n)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'idem\_h\_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int64{false: 2, true: 0}[traced]; n != want {
			t.Fatalf("%d handler statements prepared by idem's name after a first QueryRow, want %d", n, want)
		}
		if err := d.EndReserved(ctx, tx, true, nil, nil); err != nil {
			t.Fatal(err)
		}
		if !has("q-first") || !has("q-second") {
			t.Errorf("after a first QueryRow: committed %v and %v, want both", has("q-first"), has("q-second"))
		}
		// A first Query that fails as it runs: the error reaches the
		// caller and nothing commits.
		tx = begin()
		rows, err := tx.Query(ctx, ins+` RETURNING k`, "q-first")
		if rows == nil {
			t.Fatalf("a failing first Query returned nil rows (error %v); pgx never does", err)
		}
		for rows.Next() {
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		} else if !errors.Is(rows.Err(), err) {
			t.Fatalf("a failing first Query: error %v, rows.Err() %v; want the same", err, rows.Err())
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "23505" {
			t.Fatalf("duplicate first Query: %v, want a unique violation", err)
		}
		if err := d.EndReserved(ctx, tx, true, []store.Stmt{{SQL: ins, Args: []any{"after-q-abort"}}}, nil); !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("EndReserved after a failed first Query: %v, want ErrTxCommitRollback", err)
		}
		if has("after-q-abort") {
			t.Error("EndReserved committed after a failed first Query")
		}

		// A first Query without rows (its command tag, its connection), a
		// first QueryRow that finds none, and one scanning into
		// DriverBytes, refused as pgx refuses it.
		tx = begin()
		rows, err = tx.Query(ctx, ins, "q-no-rows")
		if err != nil {
			t.Fatal(err)
		}
		if rows.Conn() == nil {
			t.Error("a first Query's rows have no connection")
		}
		for rows.Next() {
		}
		rows.Close()
		if err := rows.Err(); err != nil || rows.CommandTag().String() != "INSERT 0 1" {
			t.Fatalf("first Query without rows: tag %q, error %v", rows.CommandTag(), err)
		}
		if err := d.EndReserved(ctx, tx, true, nil, nil); err != nil {
			t.Fatal(err)
		}
		tx = begin()
		if err := tx.QueryRow(ctx, `SELECT k FROM ad WHERE k = $1`, "absent").Scan(&got); !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("first QueryRow finding nothing: %v, want pgx.ErrNoRows", err)
		}
		if err := d.EndReserved(ctx, tx, false, nil, nil); err != nil {
			t.Fatal(err)
		}
		tx = begin()
		var raw pgtype.DriverBytes
		if err := tx.QueryRow(ctx, `SELECT k FROM ad WHERE k = $1`, "q-no-rows").Scan(&raw); err == nil || !strings.Contains(err.Error(), "DriverBytes") {
			t.Fatalf("first QueryRow into DriverBytes: %v, want refused", err)
		}
		if err := d.EndReserved(ctx, tx, false, nil, nil); err != nil {
			t.Fatal(err)
		}
		if !has("q-no-rows") {
			t.Error("a first Query without rows did not commit")
		}

		// EndReserved while the first statement's rows are still open:
		// nothing commits, the error says why, and the connection is
		// replaced (the next transaction on the one-connection pool works).
		tx = begin()
		rows, err = tx.Query(ctx, ins+` RETURNING k`, "rows-open")
		if err != nil {
			t.Fatal(err)
		}
		err = d.EndReserved(ctx, tx, true, nil, nil)
		if !errors.Is(err, pgx.ErrTxCommitRollback) || !strings.Contains(err.Error(), "rows") {
			t.Fatalf("EndReserved with the first rows open: %v, want ErrTxCommitRollback naming the open rows", err)
		}
		rows.Close()
		tx = begin()
		if _, err := tx.Exec(ctx, ins, "after-rows-open"); err != nil {
			t.Fatal(err)
		}
		if err := d.EndReserved(ctx, tx, true, nil, nil); err != nil {
			t.Fatal(err)
		}
		if has("rows-open") || !has("after-rows-open") {
			t.Errorf("rows left open: committed %v (want false); the next transaction committed %v (want true)", has("rows-open"), has("after-rows-open"))
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

		// EndReserved alone after the first statement: commit, or roll
		// back and hand the connection back outside a transaction.
		tx = begin()
		if _, err := tx.Exec(ctx, ins, "end-commit"); err != nil {
			t.Fatal(err)
		}
		if err := d.EndReserved(ctx, tx, true, nil, nil); err != nil {
			t.Fatal(err)
		}
		tx = begin()
		if _, err := tx.Exec(ctx, ins, "end-rollback"); err != nil {
			t.Fatal(err)
		}
		if err := d.EndReserved(ctx, tx, false, nil, nil); err != nil {
			t.Fatal(err)
		}
		if !has("end-commit") || has("end-rollback") {
			t.Errorf("EndReserved alone: committed %v (want true), rolled back one committed %v (want false)", has("end-commit"), has("end-rollback"))
		}

		// A first statement that fails aborts the transaction: nothing
		// of it or of EndReserved's statements commits.
		tx = begin()
		_, err = tx.Exec(ctx, ins, "first")
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
		if err := d.EndReserved(ctx, tx, true, []store.Stmt{{SQL: ins, Args: []any{"after-closed"}}}, nil); !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("EndReserved of a transaction that never began: %v, want ErrTxCommitRollback", err)
		}
		if has("outside") || has("after-closed") {
			t.Error("a statement ran outside the transaction")
		}
		if traced && tracer.n.Load() == 0 {
			t.Fatal("the traced pool saw no batch")
		}
	})
}

// A first Exec that names a statement the service prepared itself on every
// connection runs it, as pgx does, and idem's name for a handler's
// statement never takes the service's own queries: after a schema change
// that makes the prepared statement stale, the request that meets it
// fails, its connection is closed, and the next request prepares afresh.
func TestReservedFirstExecPreparedElsewhere(t *testing.T) {
	const named = `adopt_named_insert`
	d, _ := pgproxy.Pgx(t, func(c *pgxpool.Config) {
		// One connection (pgproxy.Pgx's default): every request on the
		// same one while it lives. Each new connection prepares the
		// service's statement, on a table it makes sure exists.
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS ape (k text PRIMARY KEY)`); err != nil {
				return err
			}
			_, err := conn.Prepare(ctx, named, `INSERT INTO ape (k) VALUES ($1)`)
			return err
		}
	})
	ctx := context.Background()
	query := false // the first statement an Exec, or a Query read to its end
	run := func(sql, k string, commit bool) error {
		t.Helper()
		tx, ok, err := d.BeginReserved(ctx, nil)
		if err != nil || !ok {
			t.Fatalf("BeginReserved ok %v err %v", ok, err)
		}
		var execErr error
		if query {
			var rows pgx.Rows
			if rows, execErr = tx.Query(ctx, sql, k); execErr == nil {
				for rows.Next() {
					_, _ = rows.Values()
				}
				rows.Close()
				execErr = rows.Err()
			}
		} else {
			_, execErr = tx.Exec(ctx, sql, k)
		}
		if err := d.EndReserved(ctx, tx, commit && execErr == nil, nil, nil); err != nil && execErr == nil {
			return err
		}
		return execErr
	}
	for i, k := range []string{"named-1", "named-2"} {
		if err := run(named, k, true); err != nil {
			t.Fatalf("first Exec of the service's prepared statement, request %d: %v", i+1, err)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM ape WHERE k LIKE 'named-%'`); n != 2 {
		t.Fatalf("%d rows by the service's prepared statement, want 2", n)
	}

	const returning = `INSERT INTO ape (k) VALUES ($1) RETURNING *`
	// The statement is prepared under idem's name on the (only)
	// connection, so the schema change below makes that statement stale,
	// not one of pgx's statement cache, which pgx would drop by itself.
	idemNamed := func(sql string) int {
		t.Helper()
		return testdb.Count(t, d, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'idem\_h\_%' AND statement = $1`, sql)
	}
	stale := func(err error, k string) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "0A000" {
			t.Fatalf("%s after the schema change: %v, want the stale plan's 0A000", k, err)
		}
	}
	if err := run(returning, "r-1", true); err != nil {
		t.Fatal(err)
	}
	if n := idemNamed(returning); n != 1 {
		t.Fatalf("%d statements prepared by idem's name for the first Exec, want 1", n)
	}
	testdb.Exec(t, d, `ALTER TABLE ape ADD COLUMN v int`)
	stale(run(returning, "r-2", true), "r-2")
	if err := run(returning, "r-3", true); err != nil {
		t.Fatalf("the request after the schema change: %v (the stale statement outlived its connection)", err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM ape WHERE k = 'r-3'`); n != 1 {
		t.Fatalf("r-3 committed %d times, want 1", n)
	}

	// The same with a first Query whose rows are read.
	query = true
	const returningAll = `INSERT INTO ape (k) VALUES ($1) RETURNING k, *`
	if err := run(returningAll, "q-1", true); err != nil {
		t.Fatal(err)
	}
	if n := idemNamed(returningAll); n != 1 {
		t.Fatalf("%d statements prepared by idem's name for the first Query, want 1", n)
	}
	testdb.Exec(t, d, `ALTER TABLE ape ADD COLUMN w int`)
	stale(run(returningAll, "q-2", true), "q-2")
	if err := run(returningAll, "q-3", true); err != nil {
		t.Fatalf("the Query after the schema change: %v (the stale statement outlived its connection)", err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM ape WHERE k = 'q-3'`); n != 1 {
		t.Fatalf("q-3 committed %d times, want 1", n)
	}
}

// boundIdemName reports whether a Bind sent since p's last Reset named a
// handler's statement prepared by idem (idem_h_…): only the pgconn batch of
// execFirst and queryFirst binds those, pgx's own batches bind pgx's names.
func boundIdemName(p *pgproxy.Proxy) bool {
	for _, m := range p.Sent() {
		// Bind: the portal's name, then the statement's, NUL-terminated.
		if m.Type == 'B' && bytes.HasPrefix(m.Body, []byte("\x00idem_h_")) {
			return true
		}
	}
	return false
}
