package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// With DeletePublished the relay deletes each event's row once the broker
// acked it: every event is published once, in key order, no published row
// is left (none marked completed) while a parked event and the one it
// blocks stay, and — the documented trade-off — a later enqueue of a
// published caller-chosen id is queued and published again.
//
// On the partitioned layout with IDEM_TEST_PARTITIONED=1 (.ci/run).
func TestRelayDeletePublished(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRelayDeletePublished(t, e.D) })
}

func testRelayDeletePublished[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, err := New(d, Config{Source: "/orders"})
	if err != nil {
		t.Fatal(err)
	}
	table := d.Table("outbox")
	chosen := Event{ID: "order-7-created", Type: "order.created", Topic: "orders", Payload: []byte(`chosen:0`)}
	// Batches of 2 over 15 events: every round deletes by its own seqs.
	// k3's first event is rejected for good (parked): it and the event
	// behind it on its key must stay, the parked one failed, the other
	// pending.
	evs := []Event{chosen, {ID: "poison", Type: "test.event", Topic: "test.k3", Key: "k3", Payload: []byte("k3:0")}, ev("k3", 1)}
	for n := range 6 {
		evs = append(evs, ev("k1", n), ev("k2", n))
	}
	enqueueTx(t, d, o, evs...)
	pub := &fakePub{}
	pub.setFail("poison", idem.Permanent(errors.New("rejected")))
	cfg := fastRelay("deleting")
	cfg.BatchSize = 2
	cfg.DeletePublished = true
	r, err := NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRelay(t, r)
	r.Notify()
	waitFor(t, "13 published and deleted, 2 left", func() bool {
		return pub.distinct() == 13 && testdb.Count(t, d, `SELECT count(*) FROM `+table) == 2
	})
	// At least once: the batch that met the poison may have had events
	// accepted before it, published again one by one.
	msgs := pub.snapshot()
	if got := checkKeyOrder(t, msgs); got["k1"] != 6 || got["k2"] != 6 || got["chosen"] != 1 || got["k3"] != 0 {
		t.Fatalf("events per key %v", got)
	}
	mustEqual(t, "completed rows", countState(t, d, lease.Completed), 0)
	mustEqual(t, "parked rows", countState(t, d, lease.Failed), 1)
	mustEqual(t, "the blocked row", testdb.Count(t, d, `SELECT count(*) FROM `+table+` WHERE state = $1 AND ordering_key = 'k3'`, lease.Pending), 1)
	st, err := o.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "pending", st.Pending, 1)
	mustEqual(t, "parked", st.Parked, 1)

	// The published row is gone, so the same caller-chosen id is a new
	// event now: queued (a seq) and published a second time, same id.
	published := func(id string) int {
		n := 0
		for _, m := range pub.snapshot() {
			if m.ID == id {
				n++
			}
		}
		return n
	}
	before := published(chosen.ID) // before the enqueue: the relay may publish it at once
	again := enqueueTx(t, d, o, chosen)
	if again[0].Seq == 0 {
		t.Fatalf("re-enqueue of a deleted id was taken for a duplicate: %+v", again[0])
	}
	r.Notify()
	waitFor(t, "the repeat published and deleted", func() bool {
		return published(chosen.ID) > before && testdb.Count(t, d, `SELECT count(*) FROM `+table) == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	pruned, err := o.Prune(ctx, -time.Second, 100)
	if err != nil || pruned != 0 {
		t.Fatalf("prune = %d, %v; want 0 (nothing kept)", pruned, err)
	}
}

// A duplicate whose row is gone when EnqueueTx re-reads it (a relay with
// DeletePublished deleted it between the insert that skipped it and the
// read) is queued anew; one still there is compared as before. The race
// itself is a window of one statement, so the branch is driven directly.
func TestResolveDuplicateRequeuesAVanishedRow(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testResolveDuplicate(t, e.D) })
}

func testResolveDuplicate[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, err := New(d, Config{Source: "/orders"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	resolve := func(e Event) (Event, error) {
		err := store.InTx(ctx, d, func(tx TTx) error {
			return o.resolveDuplicate(ctx, d.Tx(tx), &e, now, map[ident]int64{})
		})
		return e, err
	}
	e := Event{Source: "/orders", ID: "order-9-created", Type: "order.created", Topic: "orders", Time: now, Payload: []byte(`{"id":9}`)}
	got, err := resolve(e)
	if err != nil || got.Seq == 0 {
		t.Fatalf("vanished row: seq %d, %v; want the event queued anew", got.Seq, err)
	}
	mustEqual(t, "rows", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE event_id = $1`, e.ID), 1)
	if got, err := resolve(e); err != nil || got.Seq != 0 {
		t.Fatalf("row present, same content: seq %d, %v; want a duplicate (seq 0)", got.Seq, err)
	}
	e.Payload = []byte(`{"id":10}`)
	if _, err := resolve(e); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("row present, other content: %v, want ErrFingerprintMismatch", err)
	}
}
