package idemtest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/httpserver"
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

// An after-response hook sends the receipt once the client has its answer
// (still connected, a fresh 2xx), not for a replay: when the answer is
// lost, the payment is recorded, and the retry, a replay, sends nothing.
// The lost-response scenario now drops attempt 1's answer, so it catches
// this every time; before, it read the answer like any other and passed,
// and only the client-gives-up scenario could see it, when its race let
// the middleware commit.
func TestHTTPCatchesEffectAfterTheAnswer(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p idemtestcase.Payments
		rec := idemtestcase.NewRecorder(t)
		idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
			pay := env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				tx, _ := idemhttp.SQLTx(ctx)
				key := idemhttp.Key(ctx)
				if _, err := tx.ExecContext(ctx, idemtestcase.Q(env.DB.Dialect, `INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`), key); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				idemtestcase.Created(w, key, 1)
			}))
			return idemtestcase.Mux("POST /payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sw := &httpserver.StatusWriter{ResponseWriter: w}
				pay.ServeHTTP(sw, r)
				// the bug: the receipt depends on the client reading the answer
				if sw.Status/100 == 2 && w.Header().Get(idemhttp.HeaderReplayed) == "" && r.Context().Err() == nil {
					p.Mailer.Add(1)
				}
			}))
		}), idemtestcase.PayCase)
		rec.MustFailWith(t, `scenario "lost response"`, "answer written but never read by the client: 201",
			"receipt e-mails sent for", "after-response hook")
	})
}

// A route with an idempotency layer of its own (a replay cache in memory,
// the payment committed in a transaction of its own, outside any key's)
// answers like idemhttp; the handler never runs behind env.Idempotent, and
// the first scenario now says so by the run count. (Before, it was caught
// later and indirectly, by a fault that was never reached.)
func TestHTTPCatchesIdempotencyOfItsOwn(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p idemtestcase.Payments
		rec := idemtestcase.NewRecorder(t)
		idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
			var mu sync.Mutex
			answers := map[string][]byte{}
			return idemtestcase.Mux("POST /payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				key := r.Header.Get(idemhttp.HeaderKey)
				mu.Lock()
				defer mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				if body, ok := answers[key]; ok {
					w.Header().Set(idemhttp.HeaderReplayed, "true")
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write(body)
					return
				}
				err := func() error { // the bug: a transaction of its own, not the key's
					tx, err := env.DB.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer func() { _ = tx.Rollback() }()
					for _, q := range []string{`INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`, `INSERT INTO mails (idem_key) VALUES ($1)`} {
						if _, err := tx.ExecContext(ctx, idemtestcase.Q(env.DB.Dialect, q), key); err != nil {
							return err
						}
					}
					return tx.Commit()
				}()
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				body := fmt.Appendf(nil, `{"payment":%q,"amount":1}`+"\n", key)
				answers[key] = body
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(body)
			}))
		}), idemtestcase.PayCase)
		rec.MustFailWith(t, `scenario "sequential retry"`, "the handler ran 0 time(s) behind env.Idempotent for this key, want 1",
			"replay cache of the service's own")
	})
}

// A shadow middleware in front of env.Idempotent sends every request again,
// once answered, under a derived key: each request runs the handler twice
// (two payments for one), under keys the invariant sees as distinct. The
// run count, kept per request, catches it; before, every scenario passed.
func TestHTTPCatchesHandlerRunTwicePerRequest(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p idemtestcase.Payments
		rec := idemtestcase.NewRecorder(t)
		idemtest.HTTP(rec, p.Service(b, func(env idemtest.Env) http.Handler {
			pay := env.Idempotent(idemtestcase.Pay(env))
			return idemtestcase.Mux("POST /payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				shadow := r.Clone(r.Context()) // the bug: the shadow copy runs the handler again
				shadow.Header.Set(idemhttp.HeaderKey, r.Header.Get(idemhttp.HeaderKey)+"-shadow")
				shadow.Body = io.NopCloser(bytes.NewReader(body))
				r.Body = io.NopCloser(bytes.NewReader(body))
				pay.ServeHTTP(w, r)
				pay.ServeHTTP(httptest.NewRecorder(), shadow)
			}))
		}), idemtestcase.PayCase)
		rec.MustFailWith(t, `scenario "sequential retry"`, "the handler ran 2 time(s) behind env.Idempotent for this key, want 1",
			"shadow middleware")
	})
}
