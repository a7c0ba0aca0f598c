package pgxstore_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// BeginInsert binds its arguments as parameters: awkward strings and bytes
// must arrive unchanged, and a duplicate must come back as inserted=false
// with the connection usable.
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
	// An argument pgx cannot encode for its column is an error (pgx then
	// closes the connection: the batch was cut short), and so is a string
	// PostgreSQL refuses (NUL): nothing is inserted, nothing is left open.
	for _, bad := range []any{1.5, "nul\x00byte"} {
		if tx, _, ok, err := d.BeginInsert(ctx, `INSERT INTO bi (k, b, n) VALUES ($1, $2, $3)`, bad, []byte{}, int64(0)); ok || err == nil || tx != nil {
			t.Fatalf("%v: ok=%v err=%v, want an error", bad, ok, err)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM bi`); n != len(keys) {
		t.Fatalf("%d rows after bad arguments, want %d", n, len(keys))
	}
	// Every connection went back to the pool, or was closed; the pool
	// destroys a closed one in the background.
	for deadline := time.Now().Add(10 * time.Second); d.PgxPool().Stat().AcquiredConns() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still acquired", d.PgxPool().Stat().AcquiredConns())
		}
		time.Sleep(10 * time.Millisecond)
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

// ExecCommit commits only what it says it committed: a value that would
// comment out the COMMIT if it were SQL text is bound and committed, and a
// transaction the handler already ended or broke, or a failing statement,
// is reported with nothing committed by ExecCommit. Whatever happens the
// transaction is over and its connection back in the pool.
func TestExecCommitReportsWhatHappened(t *testing.T) {
	t.Parallel()
	d := testdb.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE ecr (k text PRIMARY KEY, v text NOT NULL DEFAULT '')`)
	testdb.Exec(t, d, `CREATE TABLE victim (x integer)`)
	const upd = `UPDATE ecr SET v = 'done' WHERE k = $1`
	cases := []struct {
		name   string
		before string // run on the transaction first; its error is ignored
		stmt   string
		// want: the error (nil for none), and the row afterwards: "" absent,
		// else its v.
		wantErr error
		wantRow string
	}{
		{name: "hostile value", before: `SET LOCAL standard_conforming_strings = off`, stmt: upd, wantRow: "done"},
		{name: "handler committed", before: `COMMIT`, stmt: upd, wantErr: pgx.ErrTxClosed, wantRow: "-"},
		{name: "handler rolled back", before: `ROLLBACK`, stmt: upd, wantErr: pgx.ErrTxClosed},
		{name: "aborted", before: `SELECT 1/0`, stmt: upd, wantErr: pgx.ErrTxCommitRollback},
		{name: "statement fails", stmt: `INSERT INTO ecr (k) VALUES ($1)`, wantErr: store.ErrUniqueViolation},
		{name: "syntax error", stmt: `UPDATE ecr SET WHERE k = $1`, wantErr: errAny},
	}
	for _, tc := range cases {
		k := hostile + " " + tc.name
		tx, inserted, ok, err := d.BeginInsert(ctx, `INSERT INTO ecr (k, v) VALUES ($1, '-')`, k)
		if err != nil || !ok || !inserted {
			t.Fatalf("%s: %v %v %v", tc.name, inserted, ok, err)
		}
		if tc.before != "" {
			_, _ = tx.Exec(ctx, tc.before)
		}
		done, err := d.ExecCommit(ctx, tx, tc.stmt, k)
		switch {
		case !done:
			t.Fatalf("%s: declined", tc.name)
		case tc.wantErr == nil && err != nil:
			t.Fatalf("%s: %v", tc.name, err)
		case tc.wantErr == errAny && err == nil:
			t.Fatalf("%s: reported success", tc.name)
		case tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.wantErr)
		}
		var v string
		err = d.PgxPool().QueryRow(ctx, `SELECT v FROM ecr WHERE k = $1`, k).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			v = ""
		} else if err != nil {
			t.Fatal(err)
		}
		if v != tc.wantRow {
			t.Fatalf("%s: row %q, want %q", tc.name, v, tc.wantRow)
		}
		if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Exec after ExecCommit: %v, want ErrTxClosed", tc.name, err)
		}
		if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("%s: Commit after ExecCommit: %v, want ErrTxClosed", tc.name, err)
		}
		if st := d.PgxPool().Stat(); st.AcquiredConns() != 0 {
			t.Fatalf("%s: %d connections still acquired", tc.name, st.AcquiredConns())
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'victim'`); n != 1 {
		t.Fatal("table victim was dropped")
	}
}

// errAny stands for "some error" in the table above.
var errAny = errors.New("any error")

// The transaction BeginInsert returns is a whole pgx.Tx: savepoints with
// pgx's semantics, batches, COPY, prepared statements, queries, large
// objects; after it ends, every method (also of a savepoint still open)
// reports ErrTxClosed, and the connection went back to the pool once.
func TestBeginInsertTx(t *testing.T) {
	t.Parallel()
	d := testdb.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE bt (k text PRIMARY KEY)`)
	tx, inserted, ok, err := d.BeginInsert(ctx, `INSERT INTO bt (k) VALUES ($1)`, "a")
	if err != nil || !ok || !inserted {
		t.Fatal(inserted, ok, err)
	}
	ins := func(q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, k string) {
		t.Helper()
		if _, err := q.Exec(ctx, `INSERT INTO bt (k) VALUES ($1)`, k); err != nil {
			t.Fatalf("insert %s: %v", k, err)
		}
	}
	// Savepoints: rolled back, released with a nested one rolled back.
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ins(sp, "sp-rolled-back")
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("second Rollback: %v", err)
	}
	sp2, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ins(sp2, "sp-kept")
	nested, err := sp2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ins(nested, "nested-rolled-back")
	if err := nested.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sp2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sp2.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Exec on a released savepoint: %v", err)
	}
	// A violation inside a savepoint, rolled back, leaves the transaction usable.
	sp3, err := tx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp3.Exec(ctx, `INSERT INTO bt (k) VALUES ('a')`); err == nil {
		t.Fatal("duplicate in savepoint: no error")
	}
	if err := sp3.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Batch, COPY, Prepare, Query, QueryRow, Conn.
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO bt (k) VALUES ($1)`, "batch-1")
	b.Queue(`INSERT INTO bt (k) VALUES ($1)`, "batch-2")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := tx.CopyFrom(ctx, pgx.Identifier{"bt"}, []string{"k"}, pgx.CopyFromRows([][]any{{"copy-1"}, {"copy-2"}})); err != nil || n != 2 {
		t.Fatalf("CopyFrom: %d %v", n, err)
	}
	if _, err := tx.Prepare(ctx, "bt_count", `SELECT count(*) FROM bt`); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := tx.QueryRow(ctx, "bt_count").Scan(&n); err != nil || n != 6 {
		t.Fatalf("count in tx: %d %v, want 6", n, err)
	}
	rows, _ := tx.Query(ctx, `SELECT k FROM bt ORDER BY k`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(got, ",") != "a,batch-1,batch-2,copy-1,copy-2,sp-kept" {
		t.Fatalf("rows in tx: %v %v", got, err)
	}
	if tx.Conn() == nil {
		t.Fatal("Conn() is nil")
	}
	// Large objects work, and make ExecCommit decline.
	los := tx.LargeObjects()
	oid, err := los.Create(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := los.Open(ctx, oid, pgx.LargeObjectModeWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lo.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := lo.Close(); err != nil {
		t.Fatal(err)
	}
	if done, err := d.ExecCommit(ctx, tx, `SELECT 1`); done || err != nil {
		t.Fatalf("ExecCommit after LargeObjects: done=%v err=%v, want declined", done, err)
	}
	open, err := tx.Begin(ctx) // a savepoint left open when the transaction ends
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Over: every method reports ErrTxClosed, the connection is back.
	closed := map[string]error{}
	_, closed["Exec"] = tx.Exec(ctx, `SELECT 1`)
	_, closed["Query"] = tx.Query(ctx, `SELECT 1`)
	closed["QueryRow"] = tx.QueryRow(ctx, `SELECT 1`).Scan(&n)
	_, closed["Begin"] = tx.Begin(ctx)
	closed["SendBatch"] = tx.SendBatch(ctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: `SELECT 1`}}}).Close()
	_, closed["CopyFrom"] = tx.CopyFrom(ctx, pgx.Identifier{"bt"}, []string{"k"}, pgx.CopyFromRows([][]any{{"late"}}))
	_, closed["Prepare"] = tx.Prepare(ctx, "late", `SELECT 1`)
	los = tx.LargeObjects()
	_, closed["LargeObjects"] = los.Create(ctx, 0)
	if tx.Conn() == nil || open.Conn() == nil {
		t.Error("Conn() after the end is nil, want the connection (as pgx)")
	}
	closed["Commit"] = tx.Commit(ctx)
	closed["Rollback"] = tx.Rollback(ctx)
	_, closed["open savepoint Exec"] = open.Exec(ctx, `SELECT 1`)
	for m, err := range closed {
		if !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("%s after Commit: %v, want ErrTxClosed", m, err)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM bt`); n != 6 {
		t.Fatalf("%d rows committed, want 6", n)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1`, oid); n != 1 {
		t.Fatal("large object not committed")
	}
	if st := d.PgxPool().Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired", st.AcquiredConns())
	}
}

// The statements prepared by name on a connection are bounded (64), and
// more distinct statements still work, through pgx's statement cache.
func TestBeginInsertManyStatements(t *testing.T) {
	t.Parallel()
	d, _ := pgproxy.Pgx(t) // one connection
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE ms (k text PRIMARY KEY, n bigint NOT NULL)`)
	const statements = 80
	for i := range statements {
		sql := `INSERT INTO ms (k, n) VALUES ($1, ` + strconv.Itoa(i) + `)` // a distinct constant text each
		tx, inserted, ok, err := d.BeginInsert(ctx, sql, "k"+strconv.Itoa(i))
		if err != nil || !ok || !inserted {
			t.Fatalf("statement %d: %v %v %v", i, inserted, ok, err)
		}
		if done, err := d.ExecCommit(ctx, tx, `UPDATE ms SET n = n + $2 WHERE k = $1 /* `+strconv.Itoa(i)+` */`, "k"+strconv.Itoa(i), int64(1000)); !done || err != nil {
			t.Fatalf("statement %d: ExecCommit %v %v", i, done, err)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM ms WHERE n >= 1000`); n != statements {
		t.Fatalf("%d rows, want %d", n, statements)
	}
	// pgx names the statements prepared with their SQL as name stmt_…, and
	// those of its cache stmtcache_….
	if n := testdb.Count(t, d, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'stmt\_%'`); n > 64 {
		t.Fatalf("%d statements prepared by name on the connection, want at most 64", n)
	}
}
