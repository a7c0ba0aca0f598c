package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem/internal/idemtestcase"
)

// TestCatchesEveryWrongHandlerOnEveryBackend runs the core's idemtest
// cases (the deliberately wrong handlers, each with the words its report
// must contain, and the correct ones) on SQLite, PostgreSQL and MariaDB:
// the core's own tests cannot reach MariaDB, whose store is a module of
// its own.
func TestCatchesEveryWrongHandlerOnEveryBackend(t *testing.T) {
	for _, c := range idemtestcase.Catches {
		t.Run(c.Name, func(t *testing.T) { eachBackend(t, c.Check) })
	}
}

func TestPassesCorrectHandlersOnEveryBackend(t *testing.T) {
	t.Run("HTTP", func(t *testing.T) { eachBackend(t, idemtestcase.HTTPPasses) })
	t.Run("Inbox", func(t *testing.T) { eachBackend(t, idemtestcase.InboxPasses) })
	t.Run("Effect", func(t *testing.T) { eachBackend(t, idemtestcase.EffectPasses) })
}
