package idemtest_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/idemtest/fakeprovider"
)

// testChargeOnce is what a team writes, in a module of any path: its
// charge call, guarded by the effect ledger, charges once per key however
// the ledger re-calls it. It hands the ledger's key to the provider as the
// charge's idempotency key. (TestExampleEffect runs it.)
func testChargeOnce(t *testing.T) {
	idemtest.Effect(t, idemtest.EffectCall{Call: func(provider *fakeprovider.Client) effect.CallFunc {
		return func(ctx context.Context, key string) ([]byte, error) {
			res, err := provider.Charge(ctx, key, fakeprovider.ChargeRequest{Amount: 1200, Currency: "EUR", Reference: "order-42"})
			if err != nil {
				return nil, err
			}
			return json.Marshal(res)
		}
	}})
}

// This file is the example: a test of a charge call with idemtest.Effect,
// written with exported names only.
func ExampleEffect() {}
