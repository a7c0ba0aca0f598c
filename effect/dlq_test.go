package effect_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/store"
)

// OnFailed parks the failed effect in the dead-letter store in the same
// transaction that marks it failed.
func TestOnFailedParksInDeadLetterStore(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, d store.Driver[any]) {
		dead, err := dlq.New(d, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		l := newLedger(t, d, effect.Config{})
		schedule(t, d, l, effect.Effect{Key: "charge:9", Kind: "charge", Payload: []byte(`{"amount":-1}`)})
		w := fastWorker(t, l, effect.WorkerConfig[any]{
			OnFailed: func(ctx context.Context, tx any, e effect.Effect, cause error) error {
				_, err := dead.ParkTx(ctx, tx, dlq.Letter{Consumer: "effect:" + e.Kind, MessageID: e.Key,
					Payload: e.Payload, Error: cause.Error(), ErrorClass: idem.ErrorClass(cause), Attempts: e.Attempts})
				return err
			},
		})
		_ = w.Register("charge", func(context.Context, string, []byte) ([]byte, error) {
			return nil, idem.Permanent(errors.New("amount must be positive"))
		})
		stop := runWorker(t, w)
		waitFor(t, "failed", func() bool { return get(t, l, "charge:9").State == effect.Failed })
		stop()
		letters, err := dead.List(context.Background(), dlq.Filter{})
		if err != nil || len(letters) != 1 {
			t.Fatalf("letters %v %v", letters, err)
		}
		if lt := letters[0]; lt.MessageID != "charge:9" || lt.Consumer != "effect:charge" || lt.ErrorClass != "permanent" || string(lt.Payload) != `{"amount":-1}` {
			t.Fatalf("letter %+v", lt)
		}
	}
	forEachStore(t, run)
}
