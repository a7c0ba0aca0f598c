package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// A relay round on pgx costs one round trip once the connection has its
// statements: the transaction that marks the previous (acked) batch
// published, takes the relay lock and claims the next batch is one
// pipelined batch. Measured through a proxy that counts round trips.
func TestRelayRoundTrips(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	o, _ := New(d, Config{DisableNotify: true})
	var evs []Event
	for i := range 12 {
		evs = append(evs, ev(fmt.Sprintf("k%d", i), 0))
	}
	enqueueTx(t, d, o, evs...)
	pub := &fakePub{}
	cfg := fastRelay("rt")
	cfg.BatchSize = 2
	cfg.DisableListen = true
	r, err := NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pp pipe
	// Warm-up: the first two rounds prepare the claim (round 1) and the
	// mark (round 2) on the connection.
	p.Reset()
	for i := range 2 {
		if n, err := r.round(ctx, &pp); err != nil || n != 2 {
			t.Fatalf("round %d: %d, %v", i+1, n, err)
		}
	}
	t.Logf("rounds 1-2 (first use of the connection): %d round trips", p.RoundTrips())
	// Rounds 3-6: each publishes one batch while one round trip marks the
	// previous one and claims the next.
	for i := 3; i <= 6; i++ {
		p.Reset()
		n, err := r.round(ctx, &pp)
		if err != nil || n != 2 {
			t.Fatalf("round %d: %d, %v", i, n, err)
		}
		t.Logf("round %d: %d events, %d round trips", i, n, p.RoundTrips())
		mustEqual(t, fmt.Sprintf("round trips of round %d", i), p.RoundTrips(), 1)
	}
	// The last round: the mark of the last batch and an empty claim.
	p.Reset()
	if n, err := r.round(ctx, &pp); err != nil || n != 0 {
		t.Fatalf("last round: %d, %v", n, err)
	}
	mustEqual(t, "round trips of the last round", p.RoundTrips(), 1)
	mustEqual(t, "published", countState(t, d, lease.Completed), 12)
	mustEqual(t, "messages", len(pub.snapshot()), 12)

	// Settling a failed batch (one event acked, one failed, one released)
	// is one round trip too, once its statements are prepared.
	settle := func(name string) int {
		out := enqueueTx(t, d, o, ev(name+"-ok", 0), ev(name+"-bad", 0), ev(name+"-rest", 0))
		cfg := fastRelay(name)
		cfg.DisableListen = true
		r, _ := NewRelay(d, pub, cfg)
		evs, err := r.claim(ctx)
		if err != nil || len(evs) != 3 || evs[0].ID != out[0].ID {
			t.Fatalf("claim: %d, %v", len(evs), err)
		}
		p.Reset()
		if err := r.settle(ctx, evs[:1], []failure{{evs[1], errors.New("rejected")}}, evs[2:]); err != nil {
			t.Fatal(err)
		}
		rt := p.RoundTrips()
		testdb.Exec(t, d, `DELETE FROM `+d.Table("outbox"))
		return rt
	}
	t.Logf("first settle: %d round trips", settle("s1"))
	mustEqual(t, "round trips of a settle", settle("s2"), 1)
}
