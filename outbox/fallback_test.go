package outbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// testClock is a RelayConfig.Now that a test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// slowSinglesPub refuses every batch (a transient failure, so the relay
// publishes one by one) and accepts single messages, each taking step of
// the test's clock.
type slowSinglesPub struct {
	clock *testClock
	step  time.Duration
	mu    sync.Mutex
	got   []idem.Message
}

func (p *slowSinglesPub) Publish(_ context.Context, msgs ...idem.Message) error {
	if len(msgs) > 1 {
		return errors.New("fake broker: batch refused")
	}
	p.clock.add(p.step)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, msgs...)
	return nil
}

func (p *slowSinglesPub) Close() error { return nil }

// After a batch fails, the relay publishes its events one by one, but
// starts no publish that could end after the batch's claims run out: a
// relay that went on would publish events another relay had meanwhile
// claimed and published too. The events left are released at once.
func TestFallbackStopsBeforeTheClaimsRunOut(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testFallbackStops(t, e.D) })
}

func testFallbackStops[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, err := New(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	enqueueTx(t, d, o, ev("", 0), ev("", 1), ev("", 2), ev("", 3), ev("", 4))
	clock := &testClock{now: time.Now()}
	cfg := fastRelay("slow-singles")
	cfg.ClaimTTL, cfg.PublishTimeout, cfg.Now = 30*time.Second, 10*time.Second, clock.Now
	// Each single publish takes 12s of the claims' 30s: the third would
	// start at 24s, past 30s - PublishTimeout.
	pub := &slowSinglesPub{clock: clock, step: 12 * time.Second}
	r, err := NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var p pipe
	if n, err := r.round(ctx, &p); err != nil || n != 5 {
		t.Fatalf("round: %d events, %v; want 5", n, err)
	}
	mustEqual(t, "published one by one", len(pub.got), 2)
	mustEqual(t, "marked published", countState(t, d, lease.Completed), 2)
	mustEqual(t, "released, unclaimed", testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("outbox")+`
		WHERE state = $1 AND claimed_by = '' AND claim_until = 0 AND attempts = 0`, lease.Pending), 3)
}

// NewRelay refuses a PublishTimeout of half ClaimTTL or more: a batch is
// claimed while the batch before it is being published, then published
// itself, so its claims must outlast two publishes.
func TestRelayPublishTimeoutUnderHalfTheClaim(t *testing.T) {
	d := testdb.SQLite(t)
	for _, c := range []struct {
		ttl, timeout time.Duration
		ok           bool
	}{
		{30 * time.Second, 0, true}, // ClaimTTL/3
		{30 * time.Second, 14 * time.Second, true},
		{30 * time.Second, 15 * time.Second, false},
		{30 * time.Second, 20 * time.Second, false},
	} {
		_, err := NewRelay(d, &fakePub{}, RelayConfig{ClaimTTL: c.ttl, PublishTimeout: c.timeout})
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, idem.ErrInvalidOption)) {
			t.Errorf("ClaimTTL %v, PublishTimeout %v: %v; want ok=%v (else idem.ErrInvalidOption)", c.ttl, c.timeout, err, c.ok)
		}
	}
}
