package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// countingDriver counts the statements run through Tx queriers.
type countingDriver[TTx any] struct {
	store.Driver[TTx]
	n *atomic.Int64
}

func (c countingDriver[TTx]) Tx(tx TTx) store.Querier {
	return countingQuerier{c.Driver.Tx(tx), c.n}
}

type countingQuerier struct {
	store.Querier
	n *atomic.Int64
}

func (c countingQuerier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	c.n.Add(1)
	return c.Querier.Exec(ctx, sql, args...)
}

func (c countingQuerier) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	c.n.Add(1)
	return c.Querier.Query(ctx, sql, args...)
}

func (c countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	c.n.Add(1)
	return c.Querier.QueryRow(ctx, sql, args...)
}

// Enqueue on PostgreSQL is one statement (one round trip) whatever the
// number of events and keys, with the key locks, the rows and the notify;
// the rows are in the table with seqs in argument order.
func TestEnqueueOneStatement(t *testing.T) {
	t.Run("pgx", func(t *testing.T) { testEnqueueOneStatement(t, testdb.Pgx(t)) })
	t.Run("sql-postgres", func(t *testing.T) { testEnqueueOneStatement(t, testdb.SQLPostgres(t)) })
}

func testEnqueueOneStatement[TTx any](t *testing.T, base store.Driver[TTx]) {
	var n atomic.Int64
	d := countingDriver[TTx]{base, &n}
	o, _ := New[TTx](d, Config{NotifyInterval: -1})
	var evs []Event
	for i := range 1200 { // more than one SQLite chunk
		evs = append(evs, ev(fmt.Sprintf("k%d", i%7), i/7))
	}
	evs = append(evs, Event{Type: "t", Topic: "x", Payload: nil}) // no key, nil payload
	out := enqueueTx(t, d, o, evs...)
	mustEqual(t, "statements", n.Load(), 1)
	for i := 1; i < len(out); i++ {
		if out[i].Seq <= out[i-1].Seq {
			t.Fatalf("seq %d after %d: not in argument order", out[i].Seq, out[i-1].Seq)
		}
	}
	mustEqual(t, "rows", countState(t, base, lease.Pending), len(evs))
	// A retried enqueue: nothing inserted, one more statement per existing
	// event for the content comparison.
	n.Store(0)
	again := enqueueTx(t, d, o, out[0])
	mustEqual(t, "dup seq", again[0].Seq, 0)
	mustEqual(t, "statements for a duplicate", n.Load(), 2)
}

func TestNotifyCoalescing(t *testing.T) {
	d := testdb.SQLite(t)
	o, _ := New(d, Config{NotifyInterval: time.Hour})
	mustEqual(t, "first", o.notifyNow(), true)
	mustEqual(t, "second within the interval", o.notifyNow(), false)
	o, _ = New(d, Config{NotifyInterval: -1})
	mustEqual(t, "every time 1", o.notifyNow(), true)
	mustEqual(t, "every time 2", o.notifyNow(), true)
	o, _ = New(d, Config{DisableNotify: true})
	mustEqual(t, "disabled", o.notifyNow(), false)
}

// A transaction that did not notify (coalesced away) and commits just after
// a notifying one is published through the relay's re-check after its
// wake-up, although the relay's poll interval is an hour.
func TestCoalescedNotifyRecheck(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	o, _ := New(d, Config{NotifyInterval: time.Hour})
	pub := &fakePub{}
	cfg := fastRelay("r1")
	cfg.PollInterval = time.Hour
	r, _ := NewRelay(d, pub, cfg)
	// The first notify is taken by this warm-up enqueue, which also tells
	// us that LISTEN is established once it is published.
	enqueueTx(t, d, o, ev("warm", 0))
	startRelay(t, r) // LISTEN connect wakes the relay once
	waitFor(t, "warm-up published", func() bool { return countState(t, d, lease.Completed) == 1 })

	o2, _ := New(d, Config{NotifyInterval: time.Hour})
	a, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o2.EnqueueTx(ctx, a, ev("a", 0)); err != nil { // notifies
		t.Fatal(err)
	}
	b, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o2.EnqueueTx(ctx, b, ev("b", 0)); err != nil { // coalesced: no notify
		t.Fatal(err)
	}
	if err := d.Commit(ctx, a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if err := d.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both published", func() bool { return countState(t, d, lease.Completed) == 3 })
	checkKeyOrder(t, pub.snapshot())
}

// recordingDriver records the SQL of the statements run through Tx
// queriers.
type recordingDriver[TTx any] struct {
	store.Driver[TTx]
	sqls *[]string
}

func (c recordingDriver[TTx]) Tx(tx TTx) store.Querier {
	return recordingQuerier{c.Driver.Tx(tx), c.sqls}
}

type recordingQuerier struct {
	store.Querier
	sqls *[]string
}

func (c recordingQuerier) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	*c.sqls = append(*c.sqls, sql)
	return c.Querier.Query(ctx, sql, args...)
}

func (c recordingQuerier) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	*c.sqls = append(*c.sqls, sql)
	return c.Querier.QueryRow(ctx, sql, args...)
}

// One keyless event with no notify due is written with the one-row INSERT
// (no arrays to encode); a key (its lock) or a due notify takes the
// one-statement Enqueue. Either way the dedup is the unique constraint's: a
// retried id is accepted as a duplicate, a changed payload fails.
func TestEnqueueSingleEventStatement(t *testing.T) {
	t.Run("pgx", func(t *testing.T) { testEnqueueSingleEventStatement(t, testdb.Pgx(t)) })
	t.Run("sql-postgres", func(t *testing.T) { testEnqueueSingleEventStatement(t, testdb.SQLPostgres(t)) })
	if os.Getenv(testdb.EnvPartitioned) != "" {
		t.Run("pgx-partitioned", func(t *testing.T) { testEnqueueSingleEventStatement(t, testdb.PgxPartitioned(t)) })
	}
}

func testEnqueueSingleEventStatement[TTx any](t *testing.T, base store.Driver[TTx]) {
	ctx := context.Background()
	var sqls []string
	d := recordingDriver[TTx]{base, &sqls}
	q := base.Statements().Outbox
	run := func(cfg Config, e Event) ([]Event, error) {
		sqls = sqls[:0]
		o, _ := New[TTx](d, cfg)
		var out []Event
		err := store.InTx(ctx, base, func(tx TTx) error {
			var err error
			out, err = o.EnqueueTx(ctx, tx, e)
			return err
		})
		return out, err
	}
	e := Event{ID: "orders:7-created", Type: "t", Topic: "x", Payload: []byte(`{"order":7}`)}
	out, err := run(Config{DisableNotify: true}, e)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "keyless, no notify: statements", strings.Join(sqls, ";\n"), q.Insert(1))
	if out[0].Seq == 0 {
		t.Fatal("inserted event without a seq")
	}
	out, err = run(Config{DisableNotify: true}, e)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "retried: dup seq", out[0].Seq, 0)
	mustEqual(t, "retried: insert then content comparison", strings.Join(sqls, ";\n"), q.Insert(1)+";\n"+q.Existing)
	changed := e
	changed.Payload = []byte(`{"order":8}`)
	if _, err := run(Config{DisableNotify: true}, changed); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("changed payload: err = %v, want ErrFingerprintMismatch", err)
	}

	// One event with a key or a due notify: EnqueueOne (the partitioned
	// layout has none and takes Enqueue); several: Enqueue.
	one := cmp.Or(q.EnqueueOne, q.Enqueue)
	if _, err := run(Config{DisableNotify: true}, ev("k1", 1)); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "keyed: statements", strings.Join(sqls, ";\n"), one)
	if _, err := run(Config{NotifyInterval: -1}, Event{Type: "t", Topic: "x"}); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "notify due: statements", strings.Join(sqls, ";\n"), one)
	sqls = sqls[:0]
	o, _ := New[TTx](d, Config{DisableNotify: true})
	if err := store.InTx(ctx, base, func(tx TTx) error { _, err := o.EnqueueTx(ctx, tx, ev("k2", 1), ev("k2", 2)); return err }); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "two keyed events: statements", strings.Join(sqls, ";\n"), q.Enqueue)
	mustEqual(t, "rows", testdb.Count(t, base, `SELECT count(*) FROM `+base.Table("outbox")), 5)
}

// EnqueueOne takes the event's key lock in the caller's transaction: the
// transaction-scoped advisory lock (namespace, hashtext(key)) is held
// until it ends, and none is taken for a keyless event.
func TestEnqueueOneHoldsTheKeyLock(t *testing.T) {
	d := testdb.Pgx(t)
	if d.Statements().Outbox.EnqueueOne == "" {
		t.Fatal("the plain PostgreSQL layout has no Outbox.EnqueueOne")
	}
	ctx := context.Background()
	o, _ := New(d, Config{DisableNotify: true})
	held := func(tx pgx.Tx, key string) int {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 2
			  AND classid::int4 = $1::int4 AND objid::int8 = (hashtext($2) & 4294967295)`, o.keys.space, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	err := store.InTx(ctx, d, func(tx pgx.Tx) error {
		if _, err := o.EnqueueTx(ctx, tx, Event{Type: "t", Topic: "x"}); err != nil {
			return err
		}
		var all int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&all); err != nil {
			return err
		}
		mustEqual(t, "advisory locks after a keyless event", all, 0)
		if _, err := o.EnqueueTx(ctx, tx, ev("order-9", 0)); err != nil {
			return err
		}
		mustEqual(t, "key lock of order-9", held(tx, "order-9"), 1)
		mustEqual(t, "key lock of another key", held(tx, "order-10"), 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
