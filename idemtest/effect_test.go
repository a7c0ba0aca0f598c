package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem/internal/idemtestcase"
	"github.com/idemkit/idem/internal/testdb"
)

func TestEffectPassesCorrectCall(t *testing.T) { eachBackend(t, idemtestcase.EffectPasses) }

func TestEffectCatchesProviderCallWithoutLedgerKey(t *testing.T) {
	eachBackend(t, idemtestcase.EffectProviderCallWithoutLedgerKey)
}

// The Effect example's test passes.
func TestExampleEffect(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	testChargeOnce(t)
}
