// Package storetest is the conformance suite every idem storage driver must
// pass: transaction visibility, error translation, savepoints, concurrent
// writers (read-modify-write, and racing inserts on one key), table naming,
// and the declared abilities (SendBatch, BeginInsert/ExecCommit, Listen).
// Run it from a driver's tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Driver[pgx.Tx] { return newMigratedDriver(t) })
//	}
//
// The driver returned must be fresh and isolated (own schema or file); the
// suite creates its own tables in the connection's default schema.
//
// [Statements] is the second half: it prepares every statement of the
// driver's statement set (sqlset.Set) on its migrated database, and [Complete] checks that
// a dialect's Set leaves no statement out.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// Run runs the conformance suite against drivers made by newDriver.
func Run[TTx any](t *testing.T, newDriver func(t *testing.T) store.Driver[TTx]) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, d store.Driver[TTx])
	}{
		{"CommitAndRollback", testCommitAndRollback[TTx]},
		{"ErrorTranslation", testErrorTranslation[TTx]},
		{"Savepoints", testSavepoints[TTx]},
		{"ConcurrentWriters", testConcurrentWriters[TTx]},
		{"InTx", testInTx[TTx]},
		{"Names", testNames[TTx]},
		{"UniqueRace", testUniqueRace[TTx]},
		{"SendBatch", testSendBatch[TTx]},
		{"PipelineAbilities", testPipelineAbilities[TTx]},
		{"ReservedAbilities", testReservedAbilities[TTx]},
		{"Listener", testListener[TTx]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDriver(t)
			mustExec(t, d.Pool(), testdb.Portable(d.Dialect(), `CREATE TABLE conf_kv (k text PRIMARY KEY, v bigint NOT NULL)`))
			tc.fn(t, d)
		})
	}
}

func mustExec(t *testing.T, q store.Querier, sql string, args ...any) {
	t.Helper()
	if _, err := q.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func value(t *testing.T, q store.Querier, k string) (int64, error) {
	t.Helper()
	var v int64
	err := q.QueryRow(context.Background(), `SELECT v FROM conf_kv WHERE k = $1`, k).Scan(&v)
	return v, err
}

func testCommitAndRollback[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ($1, $2)`, "a", int64(1))
	if v, err := value(t, d.Tx(tx), "a"); err != nil || v != 1 {
		t.Fatalf("own write not visible in tx: %v %v", v, err)
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatalf("rollback after commit must be a no-op, got %v", err)
	}
	if v, err := value(t, d.Pool(), "a"); err != nil || v != 1 {
		t.Fatalf("committed write not visible: %v %v", v, err)
	}
	tx, err = d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ($1, $2)`, "b", int64(2))
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if _, err := value(t, d.Pool(), "b"); !errors.Is(err, store.ErrNoRows) {
		t.Fatalf("rolled back write: got %v, want ErrNoRows", err)
	}
}

func testErrorTranslation[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	mustExec(t, d.Pool(), `INSERT INTO conf_kv (k, v) VALUES ('dup', 1)`)
	_, err := d.Pool().Exec(ctx, `INSERT INTO conf_kv (k, v) VALUES ('dup', 2)`)
	if !errors.Is(err, store.ErrUniqueViolation) {
		t.Fatalf("duplicate key: got %v, want ErrUniqueViolation", err)
	}
	n, err := d.Pool().Exec(ctx, testdb.Portable(d.Dialect(), `INSERT INTO conf_kv (k, v) VALUES ('dup', 3) ON CONFLICT (k) DO NOTHING`))
	if err != nil || n != 0 {
		t.Fatalf("ON CONFLICT DO NOTHING: %d rows, %v; want 0 rows", n, err)
	}
	returning := `INSERT INTO conf_kv (k, v) VALUES ('new', 4), ('dup', 5) ON CONFLICT (k) DO NOTHING RETURNING k`
	if d.Dialect() == store.MySQL { // no RETURNING: a script of duplicate-skipping inserts emitting their key
		returning = `/*idem:nodup emit:$1*/ INSERT INTO conf_kv (k, v) VALUES ($1, 4); /*idem:nodup emit:$2*/ INSERT INTO conf_kv (k, v) VALUES ($2, 5)`
	}
	rows, err := d.Pool().Query(ctx, returning, returningArgs(d.Dialect())...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(got) != 1 || got[0] != "new" {
		t.Fatalf("RETURNING with a conflict: %v %v, want [new]", got, err)
	}
	if _, err := value(t, d.Pool(), "missing"); !errors.Is(err, store.ErrNoRows) {
		t.Fatalf("no row: got %v, want ErrNoRows", err)
	}
}

func testSavepoints[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	err := store.InTx(ctx, d, func(tx TTx) error {
		q := d.Tx(tx)
		mustExec(t, q, `INSERT INTO conf_kv (k, v) VALUES ('kept', 1)`)
		mustExec(t, q, `SAVEPOINT sp`)
		mustExec(t, q, `INSERT INTO conf_kv (k, v) VALUES ('undone', 1)`)
		// A failing statement inside the savepoint (aborts the transaction
		// on PostgreSQL until the rollback to the savepoint).
		if _, err := q.Exec(ctx, `INSERT INTO conf_kv (k, v) VALUES ('kept', 2)`); !errors.Is(err, store.ErrUniqueViolation) {
			return fmt.Errorf("want a unique violation, got %v", err)
		}
		if _, err := q.Exec(ctx, `ROLLBACK TO SAVEPOINT sp; RELEASE SAVEPOINT sp`); err != nil {
			return err
		}
		_, err := q.Exec(ctx, `INSERT INTO conf_kv (k, v) VALUES ('after', 1)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"kept": true, "undone": false, "after": true} {
		_, err := value(t, d.Pool(), k)
		if (err == nil) != want {
			t.Errorf("%s: present=%v, want %v (%v)", k, err == nil, want, err)
		}
	}
}

func testConcurrentWriters[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	mustExec(t, d.Pool(), `INSERT INTO conf_kv (k, v) VALUES ('counter', 0)`)
	var wg sync.WaitGroup
	const workers, each = 8, 25
	for range workers {
		wg.Go(func() {
			for range each {
				err := store.InTx(ctx, d, func(tx TTx) error {
					// Read-modify-write: lost updates show up as a short count.
					v, err := value(t, d.Tx(tx), "counter")
					if err != nil {
						return err
					}
					_, err = d.Tx(tx).Exec(ctx, `UPDATE conf_kv SET v = $1 WHERE k = 'counter' AND v = $2`, v+1, v)
					if err != nil {
						return err
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// On PostgreSQL at READ COMMITTED the guarded UPDATE may match nothing
	// when another writer won; an atomic increment must never lose one.
	mustExec(t, d.Pool(), `INSERT INTO conf_kv (k, v) VALUES ('counter2', 0)`)
	for range workers {
		wg.Go(func() {
			for range each {
				if err := store.InTx(ctx, d, func(tx TTx) error {
					_, err := d.Tx(tx).Exec(ctx, `UPDATE conf_kv SET v = v + 1 WHERE k = 'counter2'`)
					return err
				}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if v, err := value(t, d.Pool(), "counter2"); err != nil || v != workers*each {
		t.Fatalf("atomic counter %d (%v), want %d", v, err, workers*each)
	}
	v, err := value(t, d.Pool(), "counter")
	if err != nil || v < 1 || v > workers*each {
		t.Fatalf("counter %d (%v)", v, err)
	}
	if d.Dialect() == store.SQLite && v != workers*each {
		// BEGIN IMMEDIATE serialises read-modify-write transactions.
		t.Fatalf("SQLite lost updates: counter %d, want %d", v, workers*each)
	}
}

func testInTx[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	boom := errors.New("boom")
	err := store.InTx(ctx, d, func(tx TTx) error {
		mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ('err', 1)`)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the function's error", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic not re-raised")
			}
		}()
		_ = store.InTx(ctx, d, func(tx TTx) error {
			mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ('panic', 1)`)
			panic("handler panic")
		})
	}()
	for _, k := range []string{"err", "panic"} {
		if _, err := value(t, d.Pool(), k); !errors.Is(err, store.ErrNoRows) {
			t.Errorf("%s: write survived a failed InTx (%v)", k, err)
		}
	}
	// The pool still works after the panic.
	if err := store.InTx(ctx, d, func(tx TTx) error {
		_, err := d.Tx(tx).Exec(ctx, `INSERT INTO conf_kv (k, v) VALUES ('ok', 1)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func testNames[TTx any](t *testing.T, d store.Driver[TTx]) {
	n := d.Names()
	want := n.Prefix + "inbox"
	if d.Dialect() == store.Postgres {
		want = `"` + n.Schema + `".inbox`
	}
	if got := d.Table("inbox"); got != want {
		t.Fatalf("Table(inbox) = %s, want %s", got, want)
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	if got := store.FromMicros(store.Micros(ts)); !got.Equal(ts) {
		t.Fatalf("micros round trip: %v", got)
	}
	if store.Micros(time.Time{}) != 0 || !store.FromMicros(0).IsZero() {
		t.Fatal("zero time must map to 0")
	}
}

// returningArgs are the arguments of the RETURNING check's statement: none
// where it is one statement with literals, the keys on MySQL.
func returningArgs(d store.Dialect) []any {
	if d == store.MySQL {
		return []any{"new", "dup"}
	}
	return nil
}
