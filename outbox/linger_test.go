package outbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// gatedPub records the ids of each Publish call; the first call reports
// itself on started and returns only once release is closed.
type gatedPub struct {
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
	batches [][]string
}

func (p *gatedPub) Publish(ctx context.Context, msgs ...idem.Message) error {
	p.mu.Lock()
	first := len(p.batches) == 0
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	p.batches = append(p.batches, ids)
	p.mu.Unlock()
	if first {
		p.started <- struct{}{}
		select {
		case <-p.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *gatedPub) Close() error { return nil }

func (p *gatedPub) snapshot() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches)
}

// A relay that keeps up waits RelayConfig.Linger before its next claim, so
// events committed while a small batch is being published go out together
// in the next batch, and the batch in flight is not held back by the wait.
func TestLingerGathersTheNextBatch(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testLingerGathers(t, e.D) }, testdb.NoSQLPostgres)
}

func testLingerGathers[TTx any](t *testing.T, d store.Driver[TTx]) {
	o, err := New(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	pub := &gatedPub{started: make(chan struct{}, 1), release: make(chan struct{})}
	cfg := fastRelay("r1")
	// Long enough that the two commits below land inside it on a loaded
	// machine; the relay's claim of the next batch starts after it.
	cfg.Linger, cfg.PollInterval, cfg.ClaimTTL = time.Second, 2*time.Second, 10*time.Second
	r, err := NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := enqueueTx(t, d, o, ev("a", 0))
	startRelay(t, r)
	r.Notify()
	<-pub.started // [a] is being published; the next claim lingers
	b := enqueueTx(t, d, o, ev("b", 0))
	close(pub.release)
	// A relay without the linger claims b on its own as soon as [a] is
	// acked; give it the time to (the check fails then: 3 batches).
	time.Sleep(100 * time.Millisecond)
	c := enqueueTx(t, d, o, ev("c", 0))
	waitFor(t, "3 published", func() bool { return countState(t, d, lease.Completed) == 3 })
	got := pub.snapshot()
	want := [][]string{{a[0].ID}, {b[0].ID, c[0].ID}}
	if len(got) != 2 || !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
		t.Fatalf("batches %v, want %v: the events committed during the linger in one batch", got, want)
	}
}

// Linger is bounded by PollInterval; a negative Linger turns it off.
func TestLingerOption(t *testing.T) {
	d := testdb.SQLite(t)
	for _, c := range []struct {
		linger, poll, ttl time.Duration
		ok                bool
	}{
		{0, 0, 0, true}, // 2ms, 500ms
		{-1, 0, 0, true},
		{500 * time.Millisecond, 0, 0, true},
		{501 * time.Millisecond, 0, 0, false},
		{time.Second, 2 * time.Second, 0, true},
		{0, time.Millisecond, 0, true}, // unset: PollInterval
		// A published batch is marked after up to two publishes
		// (PublishTimeout, ClaimTTL/3 by default) and two lingers: the
		// claims must outlast them.
		{time.Second, 2 * time.Second, 3 * time.Second, false},
		{500 * time.Millisecond, 2 * time.Second, 3 * time.Second, false},
		{400 * time.Millisecond, 2 * time.Second, 3 * time.Second, true},
		{-1, 2 * time.Second, 3 * time.Second, true},
	} {
		r, err := NewRelay(d, &fakePub{}, RelayConfig{Linger: c.linger, PollInterval: c.poll, ClaimTTL: c.ttl})
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, idem.ErrInvalidOption)) {
			t.Errorf("Linger %v, PollInterval %v, ClaimTTL %v: %v; want ok=%v (else idem.ErrInvalidOption)", c.linger, c.poll, c.ttl, err, c.ok)
		}
		if c.linger != 0 || r == nil {
			continue
		}
		if want := min(2*time.Millisecond, r.cfg.PollInterval); r.cfg.Linger != want {
			t.Errorf("default Linger %v with PollInterval %v, want %v", r.cfg.Linger, r.cfg.PollInterval, want)
		}
	}
}
