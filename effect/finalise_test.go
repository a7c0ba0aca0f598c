package effect_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/testdb"
)

// A call that lasts longer than the time the worker gives itself to record
// the outcome still gets its outcome recorded: that time counts from the
// call's return. Before, it counted from the claim, so a provider call
// longer than 10s (CallTimeout defaults to Lease/2, 30s) came back with
// the time spent: its completion was dropped about half the time, and a
// failure was never recorded; the effect stayed in progress until its
// lease ended, and the provider was called again.
func TestOutcomeOfACallLongerThanTheFinaliseTime(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		l := newLedger(t, e.D, effect.Config{Lease: time.Minute})
		const n = 6
		var effs []effect.Effect
		for i := range n {
			effs = append(effs, effect.Effect{Key: "slow-" + string(rune('a'+i)), Kind: "render", Payload: []byte(`{}`)})
		}
		schedule(t, e.D, l, effs...)
		w := fastWorker(t, l, effect.WorkerConfig[any]{Concurrency: n})
		effect.SetFinaliseTimeout(w, 20*time.Millisecond)
		if err := w.Register("render", func(ctx context.Context, key string, _ []byte) ([]byte, error) {
			time.Sleep(100 * time.Millisecond) // longer than the finalise time
			return []byte("pdf"), nil
		}); err != nil {
			t.Fatal(err)
		}
		runWorker(t, w)
		deadline := time.Now().Add(20 * time.Second) // well within the lease
		for _, eff := range effs {
			for {
				got, err := l.Get(context.Background(), eff.Key)
				if err != nil {
					t.Fatal(err)
				}
				if got.State == effect.Completed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("effect %s is %s, want completed (its outcome was lost)", eff.Key, got.State)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
}
