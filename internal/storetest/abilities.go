package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// testUniqueRace: N writers race on one key through the primary key; with
// INSERT … ON CONFLICT DO NOTHING exactly one affects a row, with a plain
// INSERT exactly one succeeds and every other gets ErrUniqueViolation — in
// transactions and on the pool.
func testUniqueRace[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	const writers = 12
	type result struct {
		n   int64
		err error
	}
	race := func(key, sql string, inTx bool) []result {
		t.Helper()
		res := make([]result, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				if !inTx {
					res[i].n, res[i].err = d.Pool().Exec(ctx, sql, key, int64(i))
					return
				}
				res[i].err = store.InTx(ctx, d, func(tx TTx) error {
					var err error
					res[i].n, err = d.Tx(tx).Exec(ctx, sql, key, int64(i))
					return err
				})
			})
		}
		close(start)
		wg.Wait()
		return res
	}
	for round := range 4 {
		inTx := round%2 == 0
		key := fmt.Sprintf("race-%d", round)
		res := race(key, testdb.Portable(d.Dialect(), `INSERT INTO conf_kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING`), inTx)
		winner, wins := -1, 0
		for i, r := range res {
			if r.err != nil {
				t.Fatalf("round %d (tx %v): writer %d: %v", round, inTx, i, r.err)
			}
			if r.n == 1 {
				winner, wins = i, wins+1
			} else if r.n != 0 {
				t.Fatalf("round %d: writer %d affected %d rows", round, i, r.n)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d (tx %v): %d writers won ON CONFLICT DO NOTHING, want exactly 1", round, inTx, wins)
		}
		if v, err := value(t, d.Pool(), key); err != nil || v != int64(winner) {
			t.Fatalf("round %d: stored %d (%v), want the winner's %d", round, v, err, winner)
		}

		key = fmt.Sprintf("plain-%d", round)
		res = race(key, `INSERT INTO conf_kv (k, v) VALUES ($1, $2)`, inTx)
		winner, wins = -1, 0
		for i, r := range res {
			switch {
			case r.err == nil:
				winner, wins = i, wins+1
			case !errors.Is(r.err, store.ErrUniqueViolation):
				t.Fatalf("round %d (tx %v): losing writer %d: %v, want ErrUniqueViolation", round, inTx, i, r.err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d (tx %v): %d plain INSERTs succeeded, want exactly 1", round, inTx, wins)
		}
		if v, err := value(t, d.Pool(), key); err != nil || v != int64(winner) {
			t.Fatalf("round %d: stored %d (%v), want the winner's %d", round, v, err, winner)
		}
	}
	if n := countRows(t, d.Pool()); n != 8 {
		t.Fatalf("%d rows after the races, want 8", n)
	}
}

func countRows(t *testing.T, q store.Querier) int64 {
	t.Helper()
	var n int64
	if err := q.QueryRow(context.Background(), `SELECT count(*) FROM conf_kv`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func present(t *testing.T, q store.Querier, k string) bool {
	t.Helper()
	_, err := value(t, q, k)
	if err != nil && !errors.Is(err, store.ErrNoRows) {
		t.Fatal(err)
	}
	return err == nil
}

// testSendBatch: statements run in order, Affected and Rows see each
// statement's own result, a unique violation inside a batch is
// ErrUniqueViolation, and the batch stops at the first error.
func testSendBatch[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	if err := d.SendBatch(ctx, d.Pool(), nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	for _, inTx := range []bool{true, false} {
		t.Run(map[bool]string{true: "Tx", false: "Pool"}[inTx], func(t *testing.T) {
			p := "tx-"
			if !inTx {
				p = "pool-"
			}
			var ins, upd, again, del int64 = -1, -1, -1, -1
			var seen []int64
			stmts := []store.Stmt{
				{SQL: `INSERT INTO conf_kv (k, v) VALUES ($1, $2), ($3, $4)`, Args: []any{p + "a", int64(1), p + "b", int64(2)}, Affected: &ins},
				{SQL: `UPDATE conf_kv SET v = v + 10 WHERE k IN ($1, $2)`, Args: []any{p + "a", p + "b"}, Affected: &upd},
				// Reads the two statements before it: the batch runs in order.
				{SQL: `SELECT v FROM conf_kv WHERE k IN ($1, $2) ORDER BY v`, Args: []any{p + "a", p + "b"}, Rows: func(r store.Rows) error {
					for r.Next() {
						var v int64
						if err := r.Scan(&v); err != nil {
							return err
						}
						seen = append(seen, v)
					}
					return nil
				}},
				{SQL: testdb.Portable(d.Dialect(), `INSERT INTO conf_kv (k, v) VALUES ($1, 0) ON CONFLICT (k) DO NOTHING`), Args: []any{p + "a"}, Affected: &again},
				{SQL: `DELETE FROM conf_kv WHERE k = $1`, Args: []any{p + "missing"}, Affected: &del},
				{SQL: `INSERT INTO conf_kv (k, v) VALUES ($1, 3)`, Args: []any{p + "c"}}, // neither Rows nor Affected
			}
			run := func(stmts []store.Stmt) error {
				if !inTx {
					return d.SendBatch(ctx, d.Pool(), stmts)
				}
				return store.InTx(ctx, d, func(tx TTx) error { return d.SendBatch(ctx, d.Tx(tx), stmts) })
			}
			if err := run(stmts); err != nil {
				t.Fatal(err)
			}
			if ins != 2 || upd != 2 || again != 0 || del != 0 {
				t.Fatalf("Affected: insert %d update %d conflict %d delete %d, want 2 2 0 0", ins, upd, again, del)
			}
			if len(seen) != 2 || seen[0] != 11 || seen[1] != 12 {
				t.Fatalf("Rows saw %v, want [11 12]", seen)
			}
			if !present(t, d.Pool(), p+"c") {
				t.Fatal("last statement of the batch did not run")
			}

			// A unique violation in the middle: translated, and nothing after it runs.
			first, later := int64(-1), int64(-1)
			laterRows := false
			err := run([]store.Stmt{
				{SQL: `INSERT INTO conf_kv (k, v) VALUES ($1, 1)`, Args: []any{p + "d"}, Affected: &first},
				{SQL: `INSERT INTO conf_kv (k, v) VALUES ($1, 1)`, Args: []any{p + "a"}},
				{SQL: `INSERT INTO conf_kv (k, v) VALUES ($1, 1)`, Args: []any{p + "e"}, Affected: &later},
				{SQL: `SELECT v FROM conf_kv`, Rows: func(store.Rows) error { laterRows = true; return nil }},
			})
			if !errors.Is(err, store.ErrUniqueViolation) {
				t.Fatalf("duplicate inside a batch: got %v, want ErrUniqueViolation", err)
			}
			if later != -1 || laterRows {
				t.Fatalf("the batch went on after its error (Affected %d, Rows called %v)", later, laterRows)
			}
			if present(t, d.Pool(), p+"e") {
				t.Fatal("a statement after the failing one was applied")
			}
			switch {
			case inTx && present(t, d.Pool(), p+"d"):
				t.Fatal("a failed batch in a rolled-back transaction left its first statement")
			case !inTx && d.SupportsPipeline() && present(t, d.Pool(), p+"d"):
				t.Fatal("a pipelined batch on the pool runs in one implicit transaction: its first statement must be undone")
			case !inTx && !d.SupportsPipeline() && !present(t, d.Pool(), p+"d"):
				t.Fatal("statement by statement on the pool, the statement before the error is committed")
			}
			if !inTx && !d.SupportsPipeline() && first != 1 {
				t.Fatalf("Affected of the statement before the error: %d, want 1", first)
			}

			// An error from a Rows callback is returned as is and stops the batch's reading.
			boom := errors.New("boom")
			called := false
			err = run([]store.Stmt{
				{SQL: `SELECT v FROM conf_kv WHERE k = $1`, Args: []any{p + "a"}, Rows: func(store.Rows) error { return boom }},
				{SQL: `SELECT v FROM conf_kv`, Rows: func(store.Rows) error { called = true; return nil }},
			})
			if !errors.Is(err, boom) || called {
				t.Fatalf("Rows error: got %v (later Rows called %v), want boom and no later callback", err, called)
			}
			// A statement that does not parse is an error, not a silent skip.
			if err := run([]store.Stmt{{SQL: `SELECT nope FROM conf_kv`, Rows: func(store.Rows) error { return nil }}}); err == nil {
				t.Fatal("a failing statement in a batch returned nil")
			}
		})
	}
}

// testPipelineAbilities: BeginInsert and ExecCommit do what they declare,
// and decline (ok=false, nothing done) where the fast path does not apply;
// a driver that pipelines accepts ExecCommit on a transaction its own
// BeginInsert started (the inbox's first-delivery path).
func testPipelineAbilities[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	const ins = `INSERT INTO conf_kv (k, v) VALUES ($1, $2)`
	tx, inserted, ok, err := d.BeginInsert(ctx, ins, "bi", int64(1))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		if d.SupportsPipeline() {
			t.Fatal("BeginInsert declined on a driver that declares pipelining")
		}
		if inserted || present(t, d.Pool(), "bi") {
			t.Fatal("a declined BeginInsert did something")
		}
	} else {
		func() {
			defer d.Rollback(ctx, tx)
			if !inserted {
				t.Fatal("BeginInsert on a fresh key: inserted=false")
			}
			if v, err := value(t, d.Tx(tx), "bi"); err != nil || v != 1 {
				t.Fatalf("insert not visible in its transaction: %d %v", v, err)
			}
			if present(t, d.Pool(), "bi") {
				t.Fatal("insert visible before commit")
			}
			ok, err := d.ExecCommit(ctx, tx, `UPDATE conf_kv SET v = $1 WHERE k = $2`, int64(5), "bi")
			if !ok {
				t.Fatal("ExecCommit declined the transaction the driver's own BeginInsert started")
			}
			if err != nil {
				t.Fatal(err)
			}
		}()
		if v, err := value(t, d.Pool(), "bi"); err != nil || v != 5 {
			t.Fatalf("after BeginInsert and ExecCommit: %d %v, want 5", v, err)
		}
		tx, inserted, ok, err = d.BeginInsert(ctx, ins, "bi", int64(2))
		if err != nil || !ok || inserted {
			if ok && inserted {
				d.Rollback(ctx, tx)
			}
			t.Fatalf("BeginInsert on an existing key: inserted %v ok %v err %v, want false true nil", inserted, ok, err)
		}
		if v, _ := value(t, d.Pool(), "bi"); v != 5 {
			t.Fatalf("existing row changed to %d", v)
		}
		// A failing statement under ExecCommit rolls the transaction back.
		tx, inserted, ok, err = d.BeginInsert(ctx, ins, "bi2", int64(1))
		if err != nil || !ok || !inserted {
			t.Fatalf("BeginInsert: inserted %v ok %v err %v", inserted, ok, err)
		}
		func() {
			defer d.Rollback(ctx, tx)
			ok, err := d.ExecCommit(ctx, tx, `INSERT INTO conf_kv (k, v) VALUES ($1, 1)`, "bi")
			if !ok || !errors.Is(err, store.ErrUniqueViolation) {
				t.Fatalf("failing ExecCommit: ok %v err %v, want true and ErrUniqueViolation", ok, err)
			}
		}()
		if present(t, d.Pool(), "bi2") {
			t.Fatal("a failed ExecCommit committed")
		}
	}

	// On a transaction of its own Begin, ExecCommit either runs and
	// commits, or declines and leaves the transaction to the caller.
	tx, err = d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(ctx, tx)
	mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ('ec', 1)`)
	ok, err = d.ExecCommit(ctx, tx, `UPDATE conf_kv SET v = $1 WHERE k = 'ec'`, int64(7))
	if err != nil {
		t.Fatalf("ExecCommit: ok %v, %v", ok, err)
	}
	if !ok {
		if v, _ := value(t, d.Tx(tx), "ec"); v != 1 {
			t.Fatal("a declined ExecCommit ran its statement")
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatalf("the transaction is still the caller's after a declined ExecCommit: %v", err)
		}
		if v, _ := value(t, d.Pool(), "ec"); v != 1 {
			t.Fatalf("after the caller's commit: %d, want 1", v)
		}
		return
	}
	if v, err := value(t, d.Pool(), "ec"); err != nil || v != 7 {
		t.Fatalf("after ExecCommit: %d %v, want 7", v, err)
	}
}

// testListener: a driver with a listener wakes Wait on NOTIFY (after the
// notifying transaction commits, not before) and survives a Wait that
// timed out; a driver without one says ErrNotSupported.
func testListener[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	channel := "conf_" + hex.EncodeToString(b) // channels are database-wide: one per test
	if !d.SupportsListener() {
		if _, err := d.Listen(ctx, channel); !errors.Is(err, store.ErrNotSupported) {
			t.Fatalf("Listen without the ability: got %v, want ErrNotSupported", err)
		}
		return
	}
	if _, err := d.Listen(ctx, "bad channel; --"); err == nil {
		t.Fatal("Listen accepted a channel that is not a plain identifier")
	}
	l, err := d.Listen(ctx, channel)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			l.Close(ctx)
		}
	}()

	// A Wait that times out leaves the listener usable.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := l.Wait(short); err == nil {
		t.Fatal("Wait returned without a notification")
	}
	cancel()

	var woke atomic.Int32
	got := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		p, err := l.Wait(wctx)
		woke.Add(1)
		if err != nil {
			errc <- err
			return
		}
		got <- p
	}()
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Tx(tx).Exec(ctx, `SELECT pg_notify($1, $2)`, channel, "hello"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if woke.Load() != 0 {
		t.Fatal("Wait woke before the notifying transaction committed")
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "hello" {
			t.Fatalf("payload %q, want hello", p)
		}
	case err := <-errc:
		t.Fatalf("Wait: %v", err)
	}
	// Notifications sent while nobody waits are queued for the next Wait.
	for _, p := range []string{"one", "two"} {
		if _, err := d.Pool().Exec(ctx, `SELECT pg_notify($1, $2)`, channel, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"one", "two"} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		p, err := l.Wait(wctx)
		cancel()
		if err != nil || p != want {
			t.Fatalf("queued notification: %q %v, want %q", p, err, want)
		}
	}
	closed = true
	if err := l.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The listening connection is gone, not back in the pool still
	// listening: a notification now reaches no one, and the pool works.
	if _, err := d.Pool().Exec(ctx, `SELECT pg_notify($1, 'late')`, channel); err != nil {
		t.Fatal(err)
	}
}

// testReservedAbilities: BeginReserved and EndReserved (the HTTP
// middleware's path) keep the connection of the setup statements for the
// transaction, commit the closing statements with the handler's work (also
// on a transaction that ran nothing), roll back without running them, run
// the after statements in every case, commit nothing when a closing
// statement fails, and reserve nothing when a setup statement fails.
// Without the ability they decline.
func testReservedAbilities[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	if !d.SupportsPipeline() {
		tx, ok, err := d.BeginReserved(ctx, []store.Stmt{{SQL: `INSERT INTO conf_kv (k, v) VALUES ('rs', 1)`}})
		if ok || err != nil || present(t, d.Pool(), "rs") {
			t.Fatalf("BeginReserved without the ability: ok %v err %v (or it ran): want false, nil, nothing done", ok, err)
		}
		if err := d.EndReserved(ctx, tx, true, nil, nil); !errors.Is(err, store.ErrNotSupported) {
			t.Fatalf("EndReserved without the ability: %v, want ErrNotSupported", err)
		}
		return
	}
	// Session state: a session-level setting (PostgreSQL, the only
	// dialect that pipelines) set by the setup statements is seen in the
	// transaction, i.e. it runs on the same connection; after resets it.
	set := func(v string) store.Stmt {
		return store.Stmt{SQL: `SELECT set_config('idem.conf_reserved', $1, false)`, Args: []any{v}}
	}
	setting := func(q store.Querier) string {
		t.Helper()
		var s string
		if err := q.QueryRow(ctx, `SELECT coalesce(current_setting('idem.conf_reserved', true), '')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range 3 * 8 { // more rounds than a small pool has connections: every one goes back
		k := fmt.Sprintf("rs%d", i)
		tx, ok, err := d.BeginReserved(ctx, []store.Stmt{set(k)})
		if err != nil || !ok {
			t.Fatalf("BeginReserved: ok %v err %v", ok, err)
		}
		if i%2 == 0 { // the handler's statements, the first one carrying BEGIN
			mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ($1, 1)`, k)
			if s := setting(d.Tx(tx)); s != k {
				t.Fatalf("setting in the reserved transaction %q, want %q: not the setup statements' connection", s, k)
			}
		}
		var n int64
		before := []store.Stmt{{SQL: testdb.Portable(d.Dialect(), `INSERT INTO conf_kv (k, v) VALUES ($1, 2) ON CONFLICT (k) DO UPDATE SET v = conf_kv.v + 1`), Args: []any{k}, Affected: &n}}
		if err := d.EndReserved(ctx, tx, true, before, []store.Stmt{set("")}); err != nil {
			t.Fatalf("EndReserved commit: %v", err)
		}
		const want = 2 // inserted by before, or 1 by the handler and then +1
		if v, err := value(t, d.Pool(), k); err != nil || v != want || n != 1 {
			t.Fatalf("after EndReserved commit: v %d err %v affected %d, want %d and 1", v, err, n, want)
		}
	}
	// Rollback: the handler's work is undone, before is not run.
	tx, ok, err := d.BeginReserved(ctx, nil)
	if err != nil || !ok {
		t.Fatalf("BeginReserved: ok %v err %v", ok, err)
	}
	mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ('rb', 1)`)
	if err := d.EndReserved(ctx, tx, false, []store.Stmt{{SQL: `INSERT INTO conf_kv (k, v) VALUES ('rb2', 1)`}}, nil); err != nil {
		t.Fatalf("EndReserved rollback: %v", err)
	}
	if present(t, d.Pool(), "rb") || present(t, d.Pool(), "rb2") {
		t.Fatal("a rolled back reserved transaction left rows")
	}
	// A failing closing statement commits nothing, and says why.
	mustExec(t, d.Pool(), `INSERT INTO conf_kv (k, v) VALUES ('dup', 1)`)
	tx, ok, err = d.BeginReserved(ctx, nil)
	if err != nil || !ok {
		t.Fatalf("BeginReserved: ok %v err %v", ok, err)
	}
	mustExec(t, d.Tx(tx), `INSERT INTO conf_kv (k, v) VALUES ('lost', 1)`)
	err = d.EndReserved(ctx, tx, true, []store.Stmt{{SQL: `INSERT INTO conf_kv (k, v) VALUES ('dup', 2)`}}, nil)
	if !errors.Is(err, store.ErrUniqueViolation) || present(t, d.Pool(), "lost") {
		t.Fatalf("failing closing statement: %v (or the work committed), want ErrUniqueViolation and nothing committed", err)
	}
	// A failing setup statement reserves nothing.
	if _, ok, err := d.BeginReserved(ctx, []store.Stmt{{SQL: `INSERT INTO conf_kv (k, v) VALUES ('dup', 3)`}}); ok || !errors.Is(err, store.ErrUniqueViolation) {
		t.Fatalf("failing setup statement: ok %v err %v, want false and ErrUniqueViolation", ok, err)
	}
	if s := setting(d.Pool()); s != "" {
		t.Fatalf("session setting %q left on a pooled connection", s)
	}
}
