package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// With DeletePublished the relay deletes each event's row once the broker
// acked it: every event is published once, in key order, no row is left
// (none marked completed), and — the documented trade-off — a later
// enqueue of a published caller-chosen id is queued and published again.
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
	enqueueTx(t, d, o, chosen, ev("k1", 0), ev("k2", 0), ev("k1", 1), ev("k1", 2))
	pub := &fakePub{}
	cfg := fastRelay("deleting")
	cfg.DeletePublished = true
	r, err := NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRelay(t, r)
	r.Notify()
	waitFor(t, "5 published and deleted", func() bool {
		return pub.distinct() == 5 && testdb.Count(t, d, `SELECT count(*) FROM `+table) == 0
	})
	msgs := pub.snapshot()
	mustEqual(t, "messages", len(msgs), 5)
	if got := checkKeyOrder(t, msgs); got["k1"] != 3 || got["k2"] != 1 || got["chosen"] != 1 {
		t.Fatalf("events per key %v", got)
	}
	mustEqual(t, "completed rows", countState(t, d, lease.Completed), 0)
	st, err := o.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "pending", st.Pending, 0)

	// The published row is gone, so the same caller-chosen id is a new
	// event now: queued (a seq) and published a second time, same id.
	again := enqueueTx(t, d, o, chosen)
	if again[0].Seq == 0 {
		t.Fatalf("re-enqueue of a deleted id was taken for a duplicate: %+v", again[0])
	}
	r.Notify()
	waitFor(t, "the repeat published and deleted", func() bool {
		return len(pub.snapshot()) == 6 && testdb.Count(t, d, `SELECT count(*) FROM `+table) == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range pub.snapshot() {
		if m.ID == chosen.ID {
			n++
		}
	}
	mustEqual(t, "publications of the chosen id", n, 2)
	pruned, err := o.Prune(ctx, -time.Second, 100)
	if err != nil || pruned != 0 {
		t.Fatalf("prune = %d, %v; want 0 (nothing kept)", pruned, err)
	}
}
