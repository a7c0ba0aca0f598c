package effect_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/store"
)

// A kind is a name like a key: up to idem.MaxKeyLen bytes, stored whole on
// every dialect (MySQL's column is VARBINARY(255)); a longer one is
// ErrInvalidInput before the store, not a store error.
func TestKindLengthLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		l := newLedger(t, d, effect.Config{})
		kind := strings.Repeat("k", idem.MaxKeyLen)
		if err := store.InTx(ctx, d, func(tx any) error {
			_, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "long-kind", Kind: kind})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got, err := l.Get(ctx, "long-kind")
		if err != nil || got.Kind != kind {
			t.Fatalf("stored kind of %d bytes (%v), want %d", len(got.Kind), err, len(kind))
		}
		err = store.InTx(ctx, d, func(tx any) error {
			_, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "longer-kind", Kind: kind + "k"})
			return err
		})
		if !errors.Is(err, idem.ErrInvalidInput) {
			t.Fatalf("kind of %d bytes: err = %v, want ErrInvalidInput", len(kind)+1, err)
		}
	})
}
