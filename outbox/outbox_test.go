package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func TestEnqueueRelay(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testEnqueueRelay(t, e.D) })
}

func testEnqueueRelay[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, err := New(d, Config{Source: "/orders"})
	if err != nil {
		t.Fatal(err)
	}
	in := Event{Type: "order.created", Subject: "order-1", Topic: "orders.created", Key: "order-1",
		DataContentType: "application/json", Headers: map[string]string{"traceparent": "00-abc"}, Payload: []byte(`{"id":1}`)}
	out := enqueueTx(t, d, o, in, ev("order-1", 1))
	if out[0].ID == "" || out[0].Seq == 0 || out[0].Source != "/orders" || out[0].Time.IsZero() || out[1].Seq <= out[0].Seq {
		t.Fatalf("enqueue did not fill id/seq/source/time: %+v", out)
	}
	st, err := o.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "pending", st.Pending, 2)

	pub := &fakePub{}
	r, err := NewRelay(d, pub, fastRelay("r1"))
	if err != nil {
		t.Fatal(err)
	}
	stop := startRelay(t, r)
	r.Notify()
	waitFor(t, "2 published", func() bool { return countState(t, d, lease.Completed) == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	msgs := pub.snapshot()
	mustEqual(t, "messages", len(msgs), 2)
	m := msgs[0]
	mustEqual(t, "id", m.ID, out[0].ID)
	mustEqual(t, "subject", m.Subject, "orders.created")
	mustEqual(t, "key", m.Key, "order-1")
	mustEqual(t, "ce-id", m.Headers[HeaderID], out[0].ID)
	mustEqual(t, "ce-source", m.Headers[HeaderSource], "/orders")
	mustEqual(t, "ce-type", m.Headers[HeaderType], "order.created")
	mustEqual(t, "ce-subject", m.Headers[HeaderSubject], "order-1")
	mustEqual(t, "content-type", m.Headers[HeaderContentType], "application/json")
	mustEqual(t, "traceparent", m.Headers["traceparent"], "00-abc")
	back, err := FromMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "round trip id", back.ID, out[0].ID)
	mustEqual(t, "round trip time", back.Time.Equal(out[0].Time.Truncate(time.Microsecond)), true)
	mustEqual(t, "round trip header", back.Headers["traceparent"], "00-abc")
	mustEqual(t, "unclaimed", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE claimed_by <> ''`), 0)

	st, err = o.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "pending after", st.Pending, 0)
	mustEqual(t, "lag after", st.Lag, 0)

	// Prune: nothing is old enough, then everything is.
	n, err := o.Prune(ctx, time.Hour, 1)
	if err != nil || n != 0 {
		t.Fatalf("prune(1h) = %d, %v", n, err)
	}
	n, err = o.Prune(ctx, -time.Second, 1)
	if err != nil || n != 2 {
		t.Fatalf("prune(-1s) = %d, %v; want 2", n, err)
	}
}

func TestEnqueueDuplicateID(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testEnqueueDuplicateID(t, e.D) })
}

func testEnqueueDuplicateID[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	e := Event{ID: "orders:42-created", Type: "t", Topic: "x", Payload: []byte("a")}
	enqueueTx(t, d, o, e)
	out := enqueueTx(t, d, o, e) // retried enqueue: same content → accepted, not written
	mustEqual(t, "dup seq", out[0].Seq, 0)
	e.Payload = []byte("b")
	err := store.InTx(ctx, d, func(tx TTx) error { _, err := o.EnqueueTx(ctx, tx, e); return err })
	if !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("different payload: err = %v, want ErrFingerprintMismatch", err)
	}
	mustEqual(t, "rows", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")), 1)

	// A JSON payload is compared as canonical JSON: a retry whose keys come
	// in another order is the same event, not a mismatch.
	j := Event{ID: "orders:43-created", Type: "t", Topic: "x", Payload: []byte(`{"order":43,"seats":2}`)}
	enqueueTx(t, d, o, j)
	j.Payload = []byte(`{ "seats": 2, "order": 43 }`)
	out = enqueueTx(t, d, o, j)
	mustEqual(t, "reordered dup seq", out[0].Seq, 0)
	// Another type under the same id is a mismatch whose error shows two
	// different fingerprints.
	j.Type = "other"
	err = store.InTx(ctx, d, func(tx TTx) error { _, err := o.EnqueueTx(ctx, tx, j); return err })
	var fm *idem.FingerprintMismatchError
	if !errors.As(err, &fm) {
		t.Fatalf("different type: err = %v, want *FingerprintMismatchError", err)
	}
	if fm.Stored == fm.Received {
		t.Fatalf("mismatch error shows equal fingerprints %s", fm.Stored.Short())
	}
	mustEqual(t, "rows", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")), 2)
	// Invalid events are rejected before anything is written.
	err = store.InTx(ctx, d, func(tx TTx) error { _, err := o.EnqueueTx(ctx, tx, Event{Topic: "x"}); return err })
	if !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("no type: err = %v", err)
	}
}

// Rollback: 1,000 transactions, 10% rolled back after Enqueue → exactly the
// committed 90% reach the broker.
func TestRollback(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRollback(t, e.D) }, testdb.NoSQLPostgres)
}

func testRollback[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	pub := &fakePub{}
	r, _ := NewRelay(d, pub, fastRelay("r1"))
	startRelay(t, r)
	committed := map[string]bool{}
	rolled := map[string]bool{}
	for i := range 1000 {
		tx, err := d.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := o.EnqueueTx(ctx, tx, ev(fmt.Sprintf("k%d", i%10), i))
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 3 {
			rolled[out[0].ID] = true
			err = d.Rollback(ctx, tx)
		} else {
			committed[out[0].ID] = true
			err = d.Commit(ctx, tx)
		}
		if err != nil {
			t.Fatal(err)
		}
		r.Notify()
	}
	waitFor(t, "900 published", func() bool { return countState(t, d, lease.Completed) == 900 })
	got := map[string]int{}
	for _, m := range pub.snapshot() {
		if rolled[m.ID] {
			t.Fatalf("event %s of a rolled-back transaction was published", m.ID)
		}
		if !committed[m.ID] {
			t.Fatalf("unknown event %s published", m.ID)
		}
		got[m.ID]++
	}
	mustEqual(t, "distinct published", len(got), 900)
	mustEqual(t, "rows", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")), 900)
}

// Crash after the broker ack and before the mark → the event is published
// again with the same message id.
func TestCrashAfterAck(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testCrashAfterAck(t, e.D) })
}

func testCrashAfterAck[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	out := enqueueTx(t, d, o, ev("a", 0), ev("a", 1), ev("b", 0))
	pub := &fakePub{}
	cfg := fastRelay("crashy")
	cfg.ClaimTTL = 300 * time.Millisecond
	r1, _ := NewRelay(d, pub, cfg)
	r1.afterPublish = func([]Event) bool { return true }
	if err := r1.Run(ctx); !errors.Is(err, errCrashed) {
		t.Fatalf("Run = %v, want simulated crash", err)
	}
	mustEqual(t, "published after crash", countState(t, d, lease.Completed), 0)
	mustEqual(t, "broker got", len(pub.snapshot()), 3)

	cfg.Name = "survivor"
	r2, _ := NewRelay(d, pub, cfg)
	startRelay(t, r2)
	waitFor(t, "3 published", func() bool { return countState(t, d, lease.Completed) == 3 })
	msgs := pub.snapshot()
	mustEqual(t, "broker got", len(msgs), 6)
	for i, e := range out {
		if msgs[i].ID != e.ID || msgs[i+3].ID != e.ID {
			t.Fatalf("republished ids differ: %s / %s, want %s", msgs[i].ID, msgs[i+3].ID, e.ID)
		}
	}
	checkKeyOrder(t, msgs)
}

// Late commit: a transaction that enqueues first and commits last is not
// skipped. (PostgreSQL only: SQLite serializes writers, so it cannot happen.)
func TestLateCommit(t *testing.T) {
	t.Run("pgx", func(t *testing.T) { testLateCommit(t, testdb.Pgx(t)) })
	t.Run("sql-postgres", func(t *testing.T) { testLateCommit(t, testdb.SQLPostgres(t)) })
}

func testLateCommit[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	pub := &fakePub{}
	r, _ := NewRelay(d, pub, fastRelay("r1"))
	startRelay(t, r)

	late, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lateEv, err := o.EnqueueTx(ctx, late, ev("late", 0))
	if err != nil {
		t.Fatal(err)
	}
	var early []Event
	for i := range 5 {
		early = append(early, enqueueTx(t, d, o, ev(fmt.Sprintf("early%d", i), 0))...)
	}
	if early[0].Seq <= lateEv[0].Seq {
		t.Fatalf("late seq %d should be lower than %d", lateEv[0].Seq, early[0].Seq)
	}
	waitFor(t, "early published", func() bool { return countState(t, d, lease.Completed) == 5 })
	if err := d.Commit(ctx, late); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "late published", func() bool { return countState(t, d, lease.Completed) == 6 })
	msgs := pub.snapshot()
	mustEqual(t, "last published", msgs[len(msgs)-1].ID, lateEv[0].ID)
}

// Same-key transactions serialize on the key lock, so seq order is commit
// order and a later event of a key cannot overtake an uncommitted one.
func TestKeyLockOrdersCommits(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	o, _ := New(d, Config{})
	tx1, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.EnqueueTx(ctx, tx1, ev("k", 0)); err != nil {
		t.Fatal(err)
	}
	second := make(chan []Event, 1)
	go func() { second <- enqueueTx(t, d, o, ev("k", 1)) }()
	select {
	case <-second:
		t.Fatal("second enqueue for the same key did not wait for the first transaction")
	case <-time.After(100 * time.Millisecond):
	}
	if err := d.Commit(ctx, tx1); err != nil {
		t.Fatal(err)
	}
	out := <-second
	pub := &fakePub{}
	r, _ := NewRelay(d, pub, fastRelay("r1"))
	startRelay(t, r)
	waitFor(t, "2 published", func() bool { return countState(t, d, lease.Completed) == 2 })
	mustEqual(t, "second published last", pub.snapshot()[1].ID, out[0].ID)
	checkKeyOrder(t, pub.snapshot())
}

// A failing event blocks only its key; it is retried with backoff, parked
// after MaxAttempts, and its key stays blocked until RetryParked.
func TestRetryAndPark(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRetryAndPark(t, e.D) }, testdb.NoSQLPostgres)
}

func testRetryAndPark[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	out := enqueueTx(t, d, o, ev("bad", 0), ev("good", 0), ev("bad", 1), ev("good", 1))
	pub := &fakePub{}
	pub.setFail(out[0].ID, errors.New("message too large"))
	var mu sync.Mutex
	var parked []Event
	retries := 0
	cfg := fastRelay("r1")
	cfg.MaxAttempts = 3
	cfg.OnRetry = func(_ context.Context, e Event, _ error, _ time.Time) { mu.Lock(); retries++; mu.Unlock() }
	cfg.OnParked = func(_ context.Context, e Event, _ error) { mu.Lock(); parked = append(parked, e); mu.Unlock() }
	counts := &relayCounts{}
	cfg.Observer = counts
	r, _ := NewRelay(d, pub, cfg)
	stop := startRelay(t, r)
	waitFor(t, "parked", func() bool { return countState(t, d, lease.Failed) == 1 })
	waitFor(t, "good published", func() bool { return countState(t, d, lease.Completed) == 2 })
	// Give the relay a few more rounds: bad:1 must stay blocked behind the parked bad:0.
	for range 5 {
		r.Notify()
		time.Sleep(20 * time.Millisecond)
	}
	mustEqual(t, "pending (blocked)", countState(t, d, lease.Pending), 1)
	for _, m := range pub.snapshot() {
		if m.ID == out[2].ID {
			t.Fatal("bad:1 published while bad:0 is parked")
		}
	}
	mu.Lock()
	mustEqual(t, "retries", retries, 2)
	mustEqual(t, "parked hook", len(parked), 1)
	mustEqual(t, "parked attempts", parked[0].Attempts, 3)
	mu.Unlock()
	// The Observer counts what the hooks see: the published events (good:0
	// and good:1) and the parked one, by class; every publish is timed.
	waitFor(t, "2 observed published", func() bool { return counts.published.Load() >= 2 })
	mustEqual(t, "observed published", counts.published.Load(), int64(2))
	if got := counts.snapshotParked(); !maps.Equal(got, map[string]int{"transient": 1}) {
		t.Errorf("observed parked %v, want transient: 1", got)
	}
	if counts.publishes.Load() < 3 {
		t.Errorf("%d publishes timed, want at least the 3 attempts of bad:0", counts.publishes.Load())
	}
	var lastErr string
	var attempts int
	if err := d.Pool().QueryRow(ctx, `SELECT last_error, attempts FROM `+d.Table("outbox")+` WHERE state = 'failed'`).Scan(&lastErr, &attempts); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "last_error", lastErr, "message too large")
	mustEqual(t, "attempts", attempts, 3)
	st, _ := o.Stats(ctx)
	mustEqual(t, "stats parked", st.Parked, 1)

	pub.setFail(out[0].ID, nil)
	n, err := o.RetryParked(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RetryParked = %d, %v", n, err)
	}
	r.Notify()
	waitFor(t, "all published", func() bool { return countState(t, d, lease.Completed) == 4 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkKeyOrder(t, pub.snapshot())
}

// A permanent error parks at once.
func TestPermanentErrorParks(t *testing.T) {
	d := testdb.SQLite(t)
	o, _ := New(d, Config{})
	out := enqueueTx(t, d, o, ev("p", 0), ev("q", 0))
	pub := &fakePub{}
	pub.setFail(out[0].ID, idem.Permanent(errors.New("schema rejected")))
	r, _ := NewRelay(d, pub, fastRelay("r1"))
	startRelay(t, r)
	waitFor(t, "parked", func() bool { return countState(t, d, lease.Failed) == 1 })
	waitFor(t, "other published", func() bool { return countState(t, d, lease.Completed) == 1 })
	mustEqual(t, "attempts", testdb.Count(t, d, `SELECT attempts FROM `+d.Table("outbox")+` WHERE state = 'failed'`), 1)
}

// Broker down for a while: events wait, nothing is parked or lost, the relay
// resumes on its own.
func TestBrokerDown(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testBrokerDown(t, e.D) }, testdb.NoSQLPostgres)
}

func testBrokerDown[TTx any](t *testing.T, d store.Driver[TTx]) {
	o, _ := New(d, Config{})
	pub := &fakePub{}
	pub.setDown(true)
	cfg := fastRelay("r1")
	cfg.MaxAttempts = 2
	r, _ := NewRelay(d, pub, cfg)
	startRelay(t, r)
	for i := range 50 {
		enqueueTx(t, d, o, ev(fmt.Sprintf("k%d", i%5), i/5))
		r.Notify()
	}
	time.Sleep(300 * time.Millisecond) // the relay keeps failing meanwhile
	mustEqual(t, "parked during outage", countState(t, d, lease.Failed), 0)
	mustEqual(t, "attempts counted during outage", testdb.Count(t, d, `SELECT coalesce(sum(attempts), 0) FROM `+d.Table("outbox")), 0)
	pub.setDown(false)
	waitFor(t, "50 published", func() bool { return countState(t, d, lease.Completed) == 50 })
	mustEqual(t, "distinct", pub.distinct(), 50)
	checkKeyOrder(t, pub.snapshot())
}

// Clean shutdown releases nothing half-done: after Run returns, no row is
// left claimed.
func TestShutdownReleases(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testShutdownReleases(t, e.D) }, testdb.NoSQLPostgres)
}

// blockingPub blocks every Publish until ctx is done.
type blockingPub struct{ started chan struct{} }

func (b *blockingPub) Publish(ctx context.Context, _ ...idem.Message) error {
	select {
	case b.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}
func (b *blockingPub) Close() error { return nil }

func testShutdownReleases[TTx any](t *testing.T, d store.Driver[TTx]) {
	o, _ := New(d, Config{})
	enqueueTx(t, d, o, ev("a", 0), ev("b", 0))
	pub := &blockingPub{started: make(chan struct{}, 1)}
	r, _ := NewRelay(d, pub, fastRelay("r1"))
	stop := startRelay(t, r)
	<-pub.started
	mustEqual(t, "claimed while publishing", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE claimed_by = 'r1'`), 2)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "claimed after stop", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE claimed_by <> ''`), 0)
	mustEqual(t, "attempts", testdb.Count(t, d, `SELECT coalesce(sum(attempts), 0) FROM `+d.Table("outbox")), 0)
	mustEqual(t, "pending", countState(t, d, lease.Pending), 2)
}

// SQLite: two relays on one file take turns through the lease; only one
// publishes at a time, and the second takes over when the first stops.
func TestSQLiteSingleWriterLease(t *testing.T) {
	d := testdb.SQLite(t)
	o, _ := New(d, Config{})
	pub := &serialPub{fakePub: &fakePub{}}
	r1, _ := NewRelay(d, pub, fastRelay("r1"))
	r2, _ := NewRelay(d, pub, fastRelay("r2"))
	stop1 := startRelay(t, r1)
	startRelay(t, r2)
	for i := range 200 {
		enqueueTx(t, d, o, ev(fmt.Sprintf("k%d", i%7), i/7))
		if i == 100 {
			if err := stop1(); err != nil {
				t.Fatal(err)
			}
		}
	}
	r2.Notify()
	waitFor(t, "200 published", func() bool { return countState(t, d, lease.Completed) == 200 })
	pub.mu.Lock()
	mustEqual(t, "overlapping publishes", pub.overlap, 0)
	pub.mu.Unlock()
	checkKeyOrder(t, pub.snapshot())
}

// Three relays on one PostgreSQL database, 20,000 events over 200 keys,
// relays stopped (cleanly or by a simulated crash after the broker ack) and
// restarted at random while producers write: every event is published at
// least once, per-key order holds as the consumer sees it, none is lost.
func TestMultiRelayChaos(t *testing.T) {
	d := testdb.Pgx(t)
	testMultiRelayChaos(t, d)
}

func testMultiRelayChaos(t *testing.T, d store.Driver[pgx.Tx]) {
	const events, keys, producers, perTx = 20000, 200, 8, 10
	ctx := context.Background()
	o, _ := New(d, Config{})
	pub := &fakePub{}

	type slot struct {
		mu   sync.Mutex
		stop func() error
		r    *Relay[pgx.Tx]
	}
	var slots [3]slot
	var crashes, restarts int
	var fired atomic.Int64
	start := func(i int) {
		cfg := fastRelay(fmt.Sprintf("relay-%d-%d", i, rand.Int()))
		cfg.BatchSize = 100 + rand.IntN(400)
		cfg.ClaimTTL = 3 * time.Second // crashed claims are taken over after 3s
		r, err := NewRelay(d, pub, cfg)
		if err != nil {
			t.Error(err)
			return
		}
		if rand.IntN(3) == 0 { // this incarnation crashes after some ack
			r.afterPublish = func([]Event) bool {
				if rand.IntN(20) == 0 {
					fired.Add(1)
					return true
				}
				return false
			}
		}
		slots[i].r, slots[i].stop = r, startRelay(t, r)
	}
	for i := range slots {
		start(i)
	}

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			// Producer p owns keys p, p+producers, …; per key the events
			// are enqueued in order 0, 1, 2, … by this goroutine.
			next := map[string]int{}
			myKeys := []string{}
			for k := p; k < keys; k += producers {
				myKeys = append(myKeys, fmt.Sprintf("key%03d", k))
			}
			for range events / producers / perTx {
				batch := make([]Event, perTx)
				for j := range batch {
					k := myKeys[rand.IntN(len(myKeys))]
					batch[j] = ev(k, next[k])
					next[k]++
				}
				if err := store.InTx(ctx, d, func(tx pgx.Tx) error { _, err := o.EnqueueTx(ctx, tx, batch...); return err }); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	chaosDone := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for {
			select {
			case <-chaosDone:
				return
			case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond):
			}
			i := rand.IntN(len(slots))
			err := slots[i].stop()
			if errors.Is(err, errCrashed) {
				crashes++
			} else if err != nil {
				t.Error(err)
			}
			restarts++
			start(i)
		}
	})
	wg.Wait()
	deadline := time.Now().Add(40 * time.Second)
	for countState(t, d, lease.Completed) != events {
		if time.Now().After(deadline) {
			rows, _ := d.Pool().Query(ctx, `SELECT seq, ordering_key, state, attempts, claimed_by, claim_until, next_attempt_at, last_error FROM `+d.Table("outbox")+` WHERE state <> 'completed' ORDER BY seq LIMIT 10`)
			for rows.Next() {
				var seq, cu, na int64
				var k, st, cb, le string
				var at int
				_ = rows.Scan(&seq, &k, &st, &at, &cb, &cu, &na, &le)
				t.Logf("seq=%d key=%s state=%s attempts=%d claimed_by=%s claim_until=%v next=%v err=%s", seq, k, st, at, cb, time.Until(store.FromMicros(cu)), time.Until(store.FromMicros(na)), le)
			}
			rows.Close()
			rows, _ = d.Pool().Query(ctx, `SELECT pid, state, coalesce(wait_event_type,''), coalesce(wait_event,''), left(query, 120) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
			for rows.Next() {
				var pid int64
				var a, b, c, q string
				_ = rows.Scan(&pid, &a, &b, &c, &q)
				t.Logf("pg %d %s %s %s %q", pid, a, b, c, q)
			}
			rows.Close()
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatalf("timed out: %d of %d published", countState(t, d, lease.Completed), events)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(chaosDone)
	chaos.Wait()
	for i := range slots {
		if err := slots[i].stop(); err != nil && !errors.Is(err, errCrashed) {
			t.Error(err)
		}
	}
	msgs := pub.snapshot()
	perKey := checkKeyOrder(t, msgs)
	total := 0
	for _, n := range perKey {
		total += n
	}
	mustEqual(t, "distinct events seen by consumer", pub.distinct(), events)
	mustEqual(t, "events in order", total, events)
	mustEqual(t, "keys", len(perKey), keys)
	t.Logf("%d events, %d broker messages (%d duplicates), %d restarts, %d simulated crashes (%d fired)",
		events, len(msgs), len(msgs)-events, restarts, crashes, fired.Load())
}

var _ = sql.ErrNoRows

// The claim's plan must not depend on statistics: on a table that grew to
// 20,000 pending rows over 200 keys before any ANALYZE (the chaos test's
// shape), neither the custom nor the generic plan may scan the table or sort
// the backlog; both must be ordered index scans that stop after the batch.
func TestClaimPlanWithoutStatistics(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	tbl := d.Table("outbox")
	if _, err := d.Pool().Exec(ctx, `INSERT INTO `+tbl+` (source, event_id, type, subject, time, ordering_key, payload, created_at)
		SELECT 'idem', 'e' || g, 't', 'test.x', 0, 'key' || (g % 200), '\x00', 0 FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	// Some blockers: a claimed head, a parked head, a retry head.
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET claimed_by = 'other', claim_until = 9e15, key_claim_until = 9e15 WHERE seq = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET state = 'failed' WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `UPDATE `+tbl+` SET next_attempt_at = 9e15 WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	r, _ := NewRelay(d, &fakePub{}, fastRelay("plan"))
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		err := store.InTx(ctx, d, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, r.q.LockClaim, r.keys.relay, "10000"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `PREPARE claimplan(text, bigint, bigint, int) AS `+r.q.Claim); err != nil {
				return err
			}
			var plan string
			if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE claimplan('x', 2, 1, 256)`).Scan(&plan); err != nil {
				return err
			}
			for _, bad := range []string{`"Seq Scan"`, `"Bitmap Heap Scan"`, `"Sort"`} {
				if strings.Contains(plan, bad) {
					t.Errorf("%s: claim plan contains %s:\n%s", mode, bad, plan)
				}
			}
			_, err := tx.Exec(ctx, `DEALLOCATE claimplan`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	evs, err := r.claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "claimed", len(evs), 200)
	blocked := map[string]bool{"key1": true, "key2": true, "key3": true}
	for _, e := range evs {
		if blocked[e.Key] {
			t.Fatalf("claimed seq %d of blocked key %s", e.Seq, e.Key)
		}
	}
	mustEqual(t, "first claimed", evs[0].Seq, 4)
}

// The table's owner functions: Counts by stored state (published is stored
// as completed, parked as failed), Backlog (the one outbox-lag
// computation: pending count and age of the oldest pending event by seq)
// and Expire (completed events published before the horizon, at most limit
// per call; pending and parked never).
func TestOwnerFunctions(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testOwnerFunctions(t, e.D) })
}

func testOwnerFunctions[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o, _ := New(d, Config{Now: func() time.Time { return created }})
	now := created.Add(90 * time.Second)
	b, err := operator.OutboxBacklog(ctx, d, now)
	if err != nil || b != (operator.Backlog{}) {
		t.Fatalf("empty Backlog = %+v, %v", b, err)
	}
	c, err := operator.OutboxCounts(ctx, d)
	if err != nil || len(c) != 0 {
		t.Fatalf("empty Counts = %v, %v", c, err)
	}
	out := enqueueTx(t, d, o, ev("a", 0), ev("b", 0), ev("c", 0), ev("d", 0), ev("e", 0))
	// Later events are younger: the lag is the oldest pending one's age.
	o2, _ := New(d, Config{Now: func() time.Time { return created.Add(time.Minute) }})
	later := enqueueTx(t, d, o2, ev("f", 0))
	tbl := d.Table("outbox")
	// a, b published long ago, c published recently, d parked; e, f pending.
	testdb.Exec(t, d, `UPDATE `+tbl+` SET state = 'completed', published_at = $1 WHERE seq IN ($2, $3)`,
		store.Micros(created.Add(-48*time.Hour)), out[0].Seq, out[1].Seq)
	testdb.Exec(t, d, `UPDATE `+tbl+` SET state = 'completed', published_at = $1 WHERE seq = $2`, store.Micros(now), out[2].Seq)
	testdb.Exec(t, d, `UPDATE `+tbl+` SET state = 'failed' WHERE seq = $1`, out[3].Seq)

	c, err = operator.OutboxCounts(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "completed", c[lease.Completed], 3)
	mustEqual(t, "failed", c[lease.Failed], 1)
	mustEqual(t, "pending", c[lease.Pending], 2)
	mustEqual(t, "states", len(c), 3)

	b, err = operator.OutboxBacklog(ctx, d, now)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "backlog pending", b.Pending, 2)
	mustEqual(t, "backlog oldest", b.Oldest, 90*time.Second)
	b, _ = operator.OutboxBacklog(ctx, d, created.Add(-time.Hour)) // a clock behind the rows: never negative
	mustEqual(t, "backlog oldest, clock behind", b.Oldest, 0)
	st, err := o.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "stats pending", st.Pending, 2)
	mustEqual(t, "stats parked", st.Parked, 1)
	mustEqual(t, "stats oldest", st.OldestPending.Equal(created), true)

	// Expire: the two old completed events, one per call with limit 1.
	horizon := created.Add(-24 * time.Hour)
	n, err := operator.OutboxExpire(ctx, d, horizon, 1)
	if err != nil || n != 1 {
		t.Fatalf("Expire(limit 1) = %d, %v", n, err)
	}
	n, err = operator.OutboxExpire(ctx, d, horizon, 10)
	if err != nil || n != 1 {
		t.Fatalf("Expire(limit 10) = %d, %v; want the second old one", n, err)
	}
	n, err = operator.OutboxExpire(ctx, d, now.Add(time.Hour), 10) // c too; pending and parked never
	if err != nil || n != 1 {
		t.Fatalf("Expire(future) = %d, %v; want 1", n, err)
	}
	mustEqual(t, "rows left", testdb.Count(t, d, `SELECT count(*) FROM `+tbl), 3)
	mustEqual(t, "later still pending", testdb.Count(t, d, `SELECT count(*) FROM `+tbl+` WHERE seq = $1 AND state = 'pending'`, later[0].Seq), 1)
}

// A failure record is fenced by the claim (lease.Fence): when another relay
// took the claim over meanwhile, the old owner counts no attempt, parks
// nothing and runs no hook; the new owner decides.
func TestFailureRecordFencedByClaim(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testFailureRecordFenced(t, e.D) }, testdb.NoSQLPostgres)
}

func testFailureRecordFenced[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	enqueueTx(t, d, o, ev("a", 0), ev("b", 0))
	var hooks atomic.Int64
	cfg := fastRelay("old")
	cfg.MaxAttempts = 1
	cfg.OnRetry = func(context.Context, Event, error, time.Time) { hooks.Add(1) }
	cfg.OnParked = func(context.Context, Event, error) { hooks.Add(1) }
	r, _ := NewRelay(d, &fakePub{}, cfg)
	evs, err := r.claim(ctx)
	if err != nil || len(evs) != 2 {
		t.Fatalf("claim = %d, %v", len(evs), err)
	}
	// Another relay takes the first event's claim over.
	testdb.Exec(t, d, `UPDATE `+d.Table("outbox")+` SET claimed_by = 'new' WHERE seq = $1`, evs[0].Seq)
	boom := errors.New("rejected")
	if err := r.settle(ctx, nil, []failure{{evs[0], boom}, {evs[1], boom}}, nil); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "hooks (the second event only)", hooks.Load(), 1)
	mustEqual(t, "taken-over event untouched", testdb.Count(t, d,
		`SELECT count(*) FROM `+d.Table("outbox")+` WHERE seq = $1 AND state = 'pending' AND attempts = 0 AND claimed_by = 'new'`, evs[0].Seq), 1)
	mustEqual(t, "own event parked", testdb.Count(t, d,
		`SELECT count(*) FROM `+d.Table("outbox")+` WHERE seq = $1 AND state = 'failed' AND attempts = 1`, evs[1].Seq), 1)
}

// A claim of keyless events is a heap-only (HOT) update on PostgreSQL
// (migration 0013): it changes no column an index refers to, and the
// table's fillfactor leaves room on each page for the claimed version, so
// no index entry is written. A keyed event's claim is not (its lease must be
// found by the blocking index) and still blocks the key's later events.
// PostgreSQL's per-transaction counters tell the two kinds of update apart.
func TestClaimIsHeapOnly(t *testing.T) {
	d := testdb.Pgx(t)
	ctx := context.Background()
	o, err := New(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	const keyless, keyed = 300, 20
	evs := make([]Event, 0, keyless+keyed)
	for i := range keyless {
		evs = append(evs, Event{Type: "test.event", Topic: "test.hot", Payload: []byte(strconv.Itoa(i))})
	}
	for i := range keyed {
		evs = append(evs, ev("k"+strconv.Itoa(i%2), i))
	}
	enqueueTx(t, d, o, evs...)
	r, err := NewRelay(d, &fakePub{}, fastRelay("hot"))
	if err != nil {
		t.Fatal(err)
	}
	var claimed, updated, hot int
	err = store.InTx(ctx, d, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, r.q.LockClaim, r.keys.relay, "10000"); err != nil {
			return err
		}
		now := time.Now()
		rows, err := tx.Query(ctx, r.q.Claim, "hot", store.Micros(now.Add(time.Minute)), store.Micros(now), keyless+keyed)
		if err != nil {
			return err
		}
		for rows.Next() {
			claimed++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated($1::regclass), pg_stat_get_xact_tuples_hot_updated($1::regclass)`,
			d.Table("outbox")).Scan(&updated, &hot)
	})
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "claimed", claimed, keyless+keyed)
	mustEqual(t, "updated", updated, keyless+keyed)
	mustEqual(t, "heap-only updates", hot, keyless)
	// The keyed claims block their keys' later events for another relay.
	enqueueTx(t, d, o, ev("k0", keyed), ev("k1", keyed+1))
	other, _ := NewRelay(d, &fakePub{}, fastRelay("other"))
	more, err := other.claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "claimed by another relay", len(more), 0)
}

// relayCounts is the Observer of a relay under test.
type relayCounts struct {
	obs.NopObserver
	published, publishes atomic.Int64
	mu                   sync.Mutex
	parked               map[string]int
}

func (c *relayCounts) OutboxPublished(n int)               { c.published.Add(int64(n)) }
func (c *relayCounts) OutboxPublishDuration(time.Duration) { c.publishes.Add(1) }
func (c *relayCounts) OutboxParked(_ context.Context, class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.parked == nil {
		c.parked = map[string]int{}
	}
	c.parked[class]++
}

func (c *relayCounts) snapshotParked() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.parked)
}
