package idemtest_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/idemtestcase"
	"github.com/idemkit/idem/internal/testdb"
)

// eachBackend runs check on SQLite, and on PostgreSQL when its test URL is
// set. (The idem command module's internal/crosstest/idemtest runs every
// case on MariaDB too.)
func eachBackend(t *testing.T, check idemtestcase.Check) {
	t.Run("sqlite", func(t *testing.T) {
		testdb.SkipWithoutSQLite(t)
		check(t, idemtest.Backend{})
	})
	t.Run("postgres", func(t *testing.T) {
		u := os.Getenv("IDEM_TEST_POSTGRES_URL")
		if u == "" {
			t.Skip("IDEM_TEST_POSTGRES_URL is not set: skipping the PostgreSQL variant")
		}
		check(t, idemtest.Backend{PostgresURL: u})
	})
}

func TestHTTPPassesCorrectHandler(t *testing.T) { eachBackend(t, idemtestcase.HTTPPasses) }

func TestHTTPCatchesEmailOutsideTransaction(t *testing.T) {
	eachBackend(t, idemtestcase.HTTPEmailOutsideTransaction)
}

func TestHTTPCatchesCounterBeforeClaim(t *testing.T) {
	eachBackend(t, idemtestcase.HTTPCounterBeforeClaim)
}

func TestHTTPCatchesWriteOnSecondConnection(t *testing.T) {
	eachBackend(t, idemtestcase.HTTPWriteOnSecondConnection)
}

func TestHTTPCatchesRouteWithoutMiddleware(t *testing.T) {
	eachBackend(t, idemtestcase.HTTPRouteWithoutMiddleware)
}

// The package example's test passes.
func TestExampleHTTP(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	testPaymentsOnce(t)
}

// A Service without its handler or invariant, or without cases, fails at
// once with a message that says what is missing.
func TestHTTPRejectsIncompleteService(t *testing.T) {
	for name, run := range map[string]func(testing.TB){
		"no invariant": func(tb testing.TB) {
			idemtest.HTTP(tb, idemtest.Service{Handler: func(idemtest.Env) http.Handler { return http.NotFoundHandler() }}, idemtestcase.PayCase)
		},
		"no cases": func(tb testing.TB) {
			var p idemtestcase.Payments
			idemtest.HTTP(tb, p.Service(idemtest.Backend{}, func(idemtest.Env) http.Handler { return http.NotFoundHandler() }))
		},
		"two-phase": func(tb testing.TB) {
			var p idemtestcase.Payments
			svc := p.Service(idemtest.Backend{}, func(idemtest.Env) http.Handler { return http.NotFoundHandler() })
			svc.Config.Mode = idemhttp.TwoPhase
			idemtest.HTTP(tb, svc, idemtestcase.PayCase)
		},
	} {
		t.Run(name, func(t *testing.T) {
			rec := idemtestcase.NewRecorder(t)
			run(rec)
			rec.MustFailWith(t, "idemtest.HTTP: ")
		})
	}
}
