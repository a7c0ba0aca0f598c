package effect_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// TestScheduleBatch checks ScheduleBatchTx against ScheduleTx's contract
// on every driver (pgx pipelines the batch; SQLite and database/sql run it
// statement by statement): new keys are created, an existing key with the
// same intent and a key repeated in the batch are not, each effect keeps
// the trace context set on it, a mismatch fails loudly and a rolled-back
// batch leaves nothing.
func TestScheduleBatch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "e-old", Kind: "email", Payload: []byte(`{"n":0}`)})
		tp := func(i int) string { return fmt.Sprintf("00-%032x-%016x-01", i+1, i+1) }
		batch := []effect.Effect{
			{Key: "e-3", Kind: "email", Payload: []byte(`{"n":3}`), TraceParent: tp(0)},
			{Key: "e-old", Kind: "email", Payload: []byte(`{"n":0}`), TraceParent: tp(1)},
			{Key: "e-1", Kind: "email", Payload: []byte(`{"n":1}`), TraceParent: tp(2), TraceState: "k=v"},
			{Key: "e-3", Kind: "email", Payload: []byte(`{"n":3}`), TraceParent: tp(3)},
		}
		var got []effect.Scheduled
		err := store.InTx(ctx, d, func(tx any) error {
			var err error
			got, err = l.ScheduleBatchTx(ctx, tx, batch)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(batch) {
			t.Fatalf("%d outcomes for %d effects", len(got), len(batch))
		}
		for i, want := range []bool{true, false, true, false} {
			if got[i].Created != want || got[i].Effect.Key != batch[i].Key || got[i].Effect.State != effect.Pending {
				t.Errorf("outcome %d: %+v, want key %s created %v pending", i, got[i], batch[i].Key, want)
			}
		}
		if e := get(t, l, "e-3"); e.TraceParent != tp(0) {
			t.Errorf("e-3 traceparent %q, want the first copy's %q", e.TraceParent, tp(0))
		}
		if e := get(t, l, "e-1"); e.TraceParent != tp(2) || e.TraceState != "k=v" {
			t.Errorf("e-1 trace context %q %q, want its own", e.TraceParent, e.TraceState)
		}
		if e := get(t, l, "e-old"); e.TraceParent != "" {
			t.Errorf("e-old traceparent %q: an existing effect was rewritten", e.TraceParent)
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("effects")); n != 3 {
			t.Fatalf("%d effects, want 3", n)
		}

		// An existing key with another payload: the batch fails naming it,
		// and its transaction rolls back, new keys included.
		err = store.InTx(ctx, d, func(tx any) error {
			_, err := l.ScheduleBatchTx(ctx, tx, []effect.Effect{
				{Key: "e-new", Kind: "email", Payload: []byte(`{}`)},
				{Key: "e-1", Kind: "email", Payload: []byte(`{"n":"other"}`)},
				{Key: "e-new2", Kind: "email", Payload: []byte(`{}`)},
			})
			return err
		})
		if !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("mismatch: err = %v", err)
		}
		for _, k := range []string{"e-new", "e-new2"} {
			if _, err := l.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("%s after the failed batch: err = %v", k, err)
			}
		}
		// Invalid input fails before anything is sent.
		err = store.InTx(ctx, d, func(tx any) error {
			_, err := l.ScheduleBatchTx(ctx, tx, []effect.Effect{{Key: "ok", Kind: "email"}, {Key: "no-kind"}})
			return err
		})
		if !errors.Is(err, idem.ErrInvalidInput) {
			t.Fatalf("invalid: err = %v", err)
		}
		if c := counts(t, l); c[effect.Pending] != 3 || len(c) != 1 {
			t.Fatalf("counts = %v", c)
		}
	})
}

// TestScheduleBatchConcurrent runs overlapping batches, each listing the
// shared keys in another order, in concurrent transactions: the inserts
// run in key order, so none deadlocks, and every key is created exactly
// once.
func TestScheduleBatchConcurrent(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		l := newLedger(t, d, effect.Config{})
		const writers, keys = 4, 32
		created := make([][]effect.Scheduled, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				batch := make([]effect.Effect, keys)
				for i := range batch {
					batch[i] = effect.Effect{Key: fmt.Sprintf("k-%02d", i), Kind: "email", Payload: []byte("p")}
				}
				if w%2 == 1 {
					slices.Reverse(batch)
				}
				errs[w] = store.InTx(ctx, d, func(tx any) error {
					var err error
					created[w], err = l.ScheduleBatchTx(ctx, tx, batch)
					return err
				})
			})
		}
		wg.Wait()
		byKey := map[string]int{}
		for w := range writers {
			if errs[w] != nil {
				t.Fatalf("writer %d: %v", w, errs[w])
			}
			for _, s := range created[w] {
				if s.Created {
					byKey[s.Effect.Key]++
				}
			}
		}
		if len(byKey) != keys {
			t.Fatalf("%d keys created, want %d", len(byKey), keys)
		}
		for k, n := range byKey {
			if n != 1 {
				t.Errorf("%s created %d times", k, n)
			}
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("effects")); n != keys {
			t.Fatalf("%d effects, want %d", n, keys)
		}
	})
}
