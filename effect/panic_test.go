package effect_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/store"
)

// A performer that always panics is retried like a failing call and then
// failed with class "panic"; an OnFailed hook that panics (once) rolls its
// transaction back and the effect is retried, instead of killing the
// worker. Before, the hook's panic crashed the process and a performer's
// panic was an anonymous transient error.
func TestWorkerRecoversPanics(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "charge:1", Kind: "charge"}, effect.Effect{Key: "charge:2", Kind: "ok"})
		var hookCalls atomic.Int64
		var class atomic.Value
		w := fastWorker(t, l, effect.WorkerConfig[any]{MaxAttempts: 3,
			OnFailed: func(_ context.Context, _ any, _ effect.Effect, cause error) error {
				if hookCalls.Add(1) == 1 {
					class.Store(idem.ErrorClass(cause)) // the performer's panic
					panic("hook bug")
				}
				return nil
			},
		})
		_ = w.Register("charge", func(context.Context, string, []byte) ([]byte, error) {
			var m map[string]int
			m["x"]++
			return nil, nil
		})
		_ = w.Register("ok", func(context.Context, string, []byte) ([]byte, error) { return []byte("done"), nil })
		stop := runWorker(t, w)
		waitFor(t, "the panicking effect failed", func() bool { return get(t, l, "charge:1").State == effect.Failed })
		waitFor(t, "the other effect completed", func() bool { return get(t, l, "charge:2").State == effect.Completed })
		stop()
		if class.Load() != "panic" || hookCalls.Load() < 2 {
			t.Errorf("OnFailed calls %d, first cause's class %v; want class panic and the hook retried after its panic",
				hookCalls.Load(), class.Load())
		}
	})
}

// panickyBreaker panics in Record, and in Allow once it was told an error.
type panickyBreaker struct{ failed atomic.Bool }

func (b *panickyBreaker) Allow() error {
	if b.failed.Load() {
		panic("breaker state corrupted")
	}
	return nil
}

func (b *panickyBreaker) Record(err error) {
	if err != nil {
		b.failed.Store(true)
		panic("breaker cannot record")
	}
}

// A panicking Breaker or Backoff (user code, like the Performer) does not
// stop the worker: a panicking Record is logged, a panicking Allow counts as
// an open breaker for its kind while the other kinds run, and a panicking
// Backoff gives the default backoff's delay. Before, each one killed the
// process.
func TestWorkerSurvivesPanickingHooks(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "flaky:1", Kind: "flaky"})
		w := fastWorker(t, l, effect.WorkerConfig[any]{Backoff: func(int) time.Duration { panic("backoff table out of range") }})
		_ = w.Register("flaky", func(context.Context, string, []byte) ([]byte, error) {
			return nil, errors.New("provider timeout")
		}, effect.WithBreaker(&panickyBreaker{}))
		_ = w.Register("mail", func(context.Context, string, []byte) ([]byte, error) { return []byte("sent"), nil })
		runWorker(t, w)
		waitFor(t, "the transient failure released with the default backoff", func() bool {
			e := get(t, l, "flaky:1")
			return e.State == effect.Pending && e.Attempts == 1 && e.LastError == "provider timeout"
		})
		schedule(t, d, l, effect.Effect{Key: "mail:1", Kind: "mail"})
		waitFor(t, "another kind performed while the breaker panics", func() bool { return get(t, l, "mail:1").State == effect.Completed })
		if e := get(t, l, "flaky:1"); e.Attempts != 1 {
			t.Errorf("flaky:1 attempts %d, want 1 (its breaker's Allow panics: treated as open)", e.Attempts)
		}
	})
}
