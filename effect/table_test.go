package effect_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testclock"
	"github.com/idemkit/idem/store"
)

// Expire deletes completed effects past their expires_at, in batches of at
// most limit, and nothing else; Counts reports the stored states.
func TestExpireAndCounts(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := testclock.New(t0)
		l := newLedger(t, d, effect.Config{Now: clock.Now, Retention: time.Hour})
		forever := newLedger(t, d, effect.Config{Now: clock.Now, Retention: -1})
		ok := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
		for _, k := range []string{"done:1", "done:2", "done:3"} {
			if _, err := l.Do(ctx, k, ok); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := forever.Do(ctx, "kept", ok); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Do(ctx, "declined", func(context.Context, string) ([]byte, error) {
			return nil, idem.Permanent(errors.New("declined"))
		}); !idem.IsPermanent(err) {
			t.Fatalf("permanent: %v", err)
		}
		schedule(t, d, l, effect.Effect{Key: "later", Kind: "email"})

		want := map[string]int64{"completed": 4, "failed": 1, "pending": 1}
		if c, err := operator.EffectCounts(ctx, d); err != nil || !maps.Equal(c, want) {
			t.Fatalf("Counts = %v, %v; want %v", c, err, want)
		}
		// Before the completed effects' expires_at: nothing to delete.
		if n, err := operator.EffectExpire(ctx, d, t0.Add(30*time.Minute), 10); err != nil || n != 0 {
			t.Fatalf("early Expire = %d, %v", n, err)
		}
		horizon := t0.Add(2 * time.Hour)
		if n, err := operator.EffectExpire(ctx, d, horizon, 2); err != nil || n != 2 {
			t.Fatalf("Expire (limit 2) = %d, %v", n, err)
		}
		if n, err := operator.EffectExpire(ctx, d, horizon, 2); err != nil || n != 1 {
			t.Fatalf("second Expire = %d, %v", n, err)
		}
		if n, err := operator.EffectExpire(ctx, d, horizon.Add(1000*time.Hour), 10); err != nil || n != 0 {
			t.Fatalf("Expire of kept, failed and pending = %d, %v", n, err)
		}
		for _, k := range []string{"kept", "declined", "later"} {
			get(t, l, k)
		}
		if _, err := l.Get(ctx, "done:1"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("expired effect: %v", err)
		}
		want = map[string]int64{"completed": 1, "failed": 1, "pending": 1}
		if c := counts(t, l); len(c) != 3 || c[effect.Completed] != 1 || c[effect.Failed] != 1 || c[effect.Pending] != 1 {
			t.Fatalf("Ledger.Counts = %v, want %v", c, want)
		}
		if held, err := operator.EffectCountHeld(ctx, d); err != nil || len(held) != 0 {
			t.Fatalf("CountHeld = %v, %v", held, err)
		}
	})
}
