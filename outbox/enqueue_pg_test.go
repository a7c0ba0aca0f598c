package outbox

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
