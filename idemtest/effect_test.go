package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem/internal/idemtestcase"
)

func TestEffectPassesCorrectCall(t *testing.T) { eachBackend(t, idemtestcase.EffectPasses) }

func TestEffectCatchesProviderCallWithoutLedgerKey(t *testing.T) {
	eachBackend(t, idemtestcase.EffectProviderCallWithoutLedgerKey)
}
