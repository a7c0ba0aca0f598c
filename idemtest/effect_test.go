package idemtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/fakeprovider"
)

// sendReceipt is the correct call: the ledger's key is the provider's
// idempotency key.
func sendReceipt(p *fakeprovider.Client) effect.CallFunc {
	return func(ctx context.Context, key string) ([]byte, error) {
		return p.Send(ctx, key, []byte(`{"to":"ada@example.com","template":"receipt"}`))
	}
}

func TestEffectPassesCorrectCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		rec := newRecorder(t)
		idemtest.Effect(rec, idemtest.EffectCall{Backend: b, Call: sendReceipt})
		if rec.Failed() {
			t.Fatalf("idemtest failed a correct call:\n%s", rec.output())
		}
	})
}

// The call makes up its own idempotency key per attempt instead of using
// the ledger's: a re-call after a crash is a second e-mail.
func TestEffectCatchesProviderCallWithoutLedgerKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		rec := newRecorder(t)
		idemtest.Effect(rec, idemtest.EffectCall{Backend: b, Call: func(p *fakeprovider.Client) effect.CallFunc {
			return func(ctx context.Context, key string) ([]byte, error) {
				own := fmt.Sprintf("receipt-%d", time.Now().UnixNano()) // the bug
				return p.Send(ctx, own, []byte(`{"to":"ada@example.com","template":"receipt"}`))
			}
		}})
		rec.mustFailWith(t, `scenario "crash between the provider call and the record"`,
			"the provider performed 3 effect(s) for 2 intended", "a key of its own")
	})
}
