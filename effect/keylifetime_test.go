package effect_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testclock"
	"github.com/idemkit/idem/store"
)

// heldCount is an idem.Observer counting the holds the worker reports
// (*idemmetrics.Metrics is the production one; its tests check the metric).
type heldCount struct {
	obs.NopObserver // what the worker does not report
	mu              sync.Mutex
	n               map[string]int
}

func (h *heldCount) EffectHeld(kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[kind]++
}

func (h *heldCount) of(kind string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[kind]
}

// An effect whose first call reached the provider but whose answer was lost
// is retried with the same key; once that key is older than the provider's
// key lifetime the worker holds the effect instead of calling: the provider
// sees no second call. An operator's Retry starts a new lifetime.
func TestKeyLifetimeHoldsInsteadOfCalling(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		p, c := newProvider(t)
		p.DropAfterEffect(1) // the first call is performed, its answer lost
		l := newLedger(t, d, effect.Config{Now: clock.Now})
		schedule(t, d, l, effect.Effect{Key: "charge:1", Kind: "charge", Payload: []byte(`{"amount":100}`)})
		m := &heldCount{n: map[string]int{}}
		w := fastWorker(t, l, effect.WorkerConfig[any]{Observer: m, Backoff: func(int) time.Duration { return time.Minute }})
		if err := w.Register("charge", c.Send, effect.WithKeyLifetime(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		stop := runWorker(t, w)
		waitFor(t, "first call released for retry", func() bool {
			e := get(t, l, "charge:1")
			return e.State == effect.Pending && e.Attempts == 1
		})
		if p.Calls() != 1 || p.UniqueEffects() != 1 {
			t.Fatalf("provider after the first call: calls=%d unique=%d", p.Calls(), p.UniqueEffects())
		}
		first := get(t, l, "charge:1").FirstAttemptAt
		if !first.Equal(clock.Now()) {
			t.Fatalf("FirstAttemptAt = %v, want %v", first, clock.Now())
		}

		clock.Advance(25 * time.Hour) // past the provider's 24 h key lifetime
		waitFor(t, "effect held", func() bool { return !get(t, l, "charge:1").HeldAt.IsZero() })
		e := get(t, l, "charge:1")
		if e.State != effect.InProgress || !e.LeaseUntil.IsZero() || !strings.Contains(e.LastError, "older than its lifetime") {
			t.Fatalf("held effect %+v", e)
		}
		// Never claimed again while held: more polls, later clock, same token.
		clock.Advance(time.Hour)
		time.Sleep(50 * time.Millisecond)
		if again := get(t, l, "charge:1"); again.Token != e.Token || again.HeldAt.IsZero() {
			t.Fatalf("held effect claimed again: %+v", again)
		}
		if p.Calls() != 1 {
			t.Fatalf("provider called %d times, want 1 (no call with an expired key)", p.Calls())
		}
		held, err := l.ListHeld(ctx, 10)
		if err != nil || len(held) != 1 || held[0].Key != "charge:1" {
			t.Fatalf("ListHeld = %v, %v", held, err)
		}
		if held, err := operator.EffectCountHeld(ctx, d); err != nil || len(held) != 1 || held["charge"] != 1 {
			t.Fatalf("CountHeld = %v, %v", held, err)
		}
		if c, err := operator.EffectCounts(ctx, d); err != nil || c["in_progress"] != 1 {
			t.Fatalf("Counts of a held effect = %v, %v", c, err)
		}
		if n := m.of("charge"); n != 1 {
			t.Fatalf("holds reported to the observer = %d, want 1", n)
		}

		// The operator checked the provider (it performed the charge once) and
		// asks for a new call: a new lifetime starts, the provider answers.
		if err := l.Retry(ctx, "charge:1"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "completed after retry", func() bool { return get(t, l, "charge:1").State == effect.Completed })
		stop()
		if p.Calls() != 2 || p.UniqueEffects() != 1 {
			t.Fatalf("provider after retry: calls=%d unique=%d", p.Calls(), p.UniqueEffects())
		}
		if e := get(t, l, "charge:1"); !e.HeldAt.IsZero() {
			t.Fatalf("completed effect still held: %+v", e)
		}
	})
}

// A failed effect redriven with Retry keeps its first attempt: past the key
// lifetime it is held, not called blindly. Resolve ends a hold.
func TestKeyLifetimeRetryOfOldFailedEffectIsHeld(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		p, c := newProvider(t)
		p.FailNext(1, 400) // permanent: the effect fails at once
		l := newLedger(t, d, effect.Config{Now: clock.Now})
		schedule(t, d, l, effect.Effect{Key: "charge:2", Kind: "charge", Payload: []byte(`{}`)})
		w := fastWorker(t, l, effect.WorkerConfig[any]{})
		if err := w.Register("charge", c.Send, effect.WithKeyLifetime(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		stop := runWorker(t, w)
		waitFor(t, "failed", func() bool { return get(t, l, "charge:2").State == effect.Failed })
		clock.Advance(48 * time.Hour)
		if err := l.Retry(ctx, "charge:2"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "held", func() bool { return !get(t, l, "charge:2").HeldAt.IsZero() })
		stop()
		if p.Calls() != 1 {
			t.Fatalf("provider calls = %d, want 1", p.Calls())
		}
		if err := l.Resolve(ctx, "charge:2", []byte(`{"reconciled":true}`)); err != nil {
			t.Fatal(err)
		}
		if e := get(t, l, "charge:2"); e.State != effect.Completed || !e.HeldAt.IsZero() {
			t.Fatalf("resolved: %+v", e)
		}
	})
}

func TestKeyLifetimeOption(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		w := fastWorker(t, newLedger(t, d, effect.Config{}), effect.WorkerConfig[any]{})
		err := w.Register("x", func(context.Context, string, []byte) ([]byte, error) { return nil, nil }, effect.WithKeyLifetime(-time.Hour))
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("negative lifetime: %v", err)
		}
		if !errors.Is(effect.ErrKeyExpired, idem.ErrNeedsReconciliation) {
			t.Fatal("ErrKeyExpired does not wrap ErrNeedsReconciliation")
		}
	})
}
