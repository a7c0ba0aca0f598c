package effect_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/store"
)

type switchBreaker struct{ open atomic.Bool }

func (b *switchBreaker) Allow() error {
	if b.open.Load() {
		return errors.New("open")
	}
	return nil
}
func (b *switchBreaker) Record(error) {}

// Saturated (and the Gate built on it) is closed while a kind's breaker is
// open, while due effects wait behind its rate limit, and open again once
// the backlog drained or the worker stopped.
func TestSaturated(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		l := newLedger(t, d, effect.Config{})
		const poll = 20 * time.Millisecond
		w := fastWorker(t, l, effect.WorkerConfig[any]{Concurrency: 8, PollInterval: poll})
		br := &switchBreaker{}
		nop := func(context.Context, string, []byte) ([]byte, error) { return nil, nil }
		var calls atomic.Int64
		if err := w.Register("email", func(context.Context, string, []byte) ([]byte, error) { calls.Add(1); return nil, nil },
			effect.WithRateLimit(rate.Limit(20), 2)); err != nil {
			t.Fatal(err)
		}
		if err := w.Register("sms", nop, effect.WithBreaker(br)); err != nil {
			t.Fatal(err)
		}
		gate := w.Gate("email", "sms")
		if sat, _ := w.Saturated("unknown"); sat {
			t.Error("an unknown kind is saturated")
		}
		if open, _ := gate(); !open {
			t.Error("gate closed before any work")
		}
		br.open.Store(true)
		if sat, after := w.Saturated("sms"); !sat || after != poll {
			t.Errorf("breaker open: Saturated = %v, %s; want true, the poll interval %s", sat, after, poll)
		}
		if open, _ := gate(); open {
			t.Error("gate open while a kind's breaker is open")
		}
		br.open.Store(false)

		// 40 e-mails at 20/s: the worker claims what its tokens allow, the
		// rest waits behind the limit, so the kind is saturated until the
		// backlog drained.
		const n = 40
		effs := make([]effect.Effect, n)
		for i := range effs {
			effs[i] = effect.Effect{Key: fmt.Sprintf("mail:%d", i), Kind: "email"}
		}
		schedule(t, d, l, effs...)
		stop := runWorker(t, w)
		var closed atomic.Bool
		waitFor(t, "the rate-limited kind to be saturated", func() bool {
			sat, after := w.Saturated("email")
			if sat && after > 0 && after <= time.Second {
				closed.Store(true)
			}
			return closed.Load()
		})
		waitFor(t, "the backlog to drain", func() bool { return counts(t, l)[effect.Completed] == n })
		waitFor(t, "the gate to open once drained", func() bool { open, _ := gate(); return open })
		stop()
		// A stopped worker leaves no stale backlog: once its rate limit has
		// a token again the kind is not saturated.
		waitFor(t, "a stopped worker's kind to be unsaturated", func() bool { sat, _ := w.Saturated("email"); return !sat })
		if calls.Load() != n {
			t.Errorf("%d calls, want %d", calls.Load(), n)
		}
	})
}
