package idemtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// eachBackend runs body on SQLite, and on PostgreSQL and MySQL when their
// test URLs are set.
func eachBackend(t *testing.T, body func(t *testing.T, b idemtest.Backend)) {
	t.Run("sqlite", func(t *testing.T) {
		testdb.SkipWithoutSQLite(t)
		body(t, idemtest.Backend{})
	})
	t.Run("postgres", func(t *testing.T) {
		u := os.Getenv("IDEM_TEST_POSTGRES_URL")
		if u == "" {
			t.Skip("IDEM_TEST_POSTGRES_URL is not set: skipping the PostgreSQL variant")
		}
		body(t, idemtest.Backend{PostgresURL: u})
	})
}

// q adapts a statement's $n placeholders to the dialect (MySQL takes ?).
func q(d store.Dialect, s string) string {
	if d == store.Postgres || d == store.SQLite {
		return s
	}
	for i := 9; i >= 1; i-- {
		s = strings.ReplaceAll(s, fmt.Sprintf("$%d", i), "?")
	}
	return s
}

// payments is the service under test: POST /payments charges an amount
// once per idempotency key, writes the payment row and queues a receipt
// e-mail. mailer counts e-mails sent straight from the handler (the wrong
// way); the correct handler queues them in the mails table instead.
type payments struct {
	mailer atomic.Int64 // e-mails sent outside any transaction
}

func (p *payments) setup(ctx context.Context, db idemtest.DB) error {
	for _, s := range []string{
		`CREATE TABLE payments (idem_key VARCHAR(255) NOT NULL, amount INTEGER NOT NULL)`,
		`CREATE TABLE mails (idem_key VARCHAR(255) NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// invariant: one payment row per key, and one receipt per payment (queued
// in mails or sent by the mailer).
func (p *payments) invariant(ctx context.Context, db idemtest.DB) error {
	var key string
	var n int
	err := db.QueryRowContext(ctx, `SELECT idem_key, COUNT(*) FROM payments GROUP BY idem_key HAVING COUNT(*) <> 1`).Scan(&key, &n)
	if err == nil {
		return fmt.Errorf("key %s has %d payment rows, want 1", key, n)
	}
	if err != sql.ErrNoRows {
		return err
	}
	var pays, mails int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM payments), (SELECT COUNT(*) FROM mails)`).Scan(&pays, &mails); err != nil {
		return err
	}
	if sent := int(p.mailer.Load()) + mails; sent != pays {
		return fmt.Errorf("%d receipt e-mails sent for %d payments", sent, pays)
	}
	return nil
}

type payRequest struct {
	Amount int `json:"amount"`
}

// pay is the correct handler: every write on the request transaction.
func pay(env idemtest.Env) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		var req payRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tx, ok := idemhttp.SQLTx(ctx)
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		key := idemhttp.Key(ctx)
		if _, err := tx.ExecContext(ctx, q(env.DB.Dialect, `INSERT INTO payments (idem_key, amount) VALUES ($1, $2)`), key, req.Amount); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(ctx, q(env.DB.Dialect, `INSERT INTO mails (idem_key) VALUES ($1)`), key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		created(w, key, req.Amount)
	}
}

func created(w http.ResponseWriter, key string, amount int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"payment":%q,"amount":%d}`+"\n", key, amount)
}

func (p *payments) service(b idemtest.Backend, handler func(env idemtest.Env) http.Handler) idemtest.Service {
	return idemtest.Service{Backend: b, Setup: p.setup, Invariant: p.invariant, Handler: handler}
}

var payCase = idemtest.Case{Name: "create payment", Path: "/payments", Body: `{"amount": 1200}`, Status: http.StatusCreated}

func mux(pattern string, h http.Handler) http.Handler {
	m := http.NewServeMux()
	m.Handle(pattern, h)
	return m
}

func TestHTTPPassesCorrectHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p payments
		rec := newRecorder(t)
		idemtest.HTTP(rec, p.service(b, func(env idemtest.Env) http.Handler {
			return mux("POST /payments", env.Idempotent(pay(env)))
		}), payCase, idemtest.Case{Path: "/payments", Body: `{"amount": 5}`})
		if rec.Failed() {
			t.Fatalf("idemtest failed a correct handler:\n%s", rec.output())
		}
	})
}

// The receipt e-mail is sent from the handler, outside the transaction: a
// rolled-back attempt has sent it, and its retry sends it again.
func TestHTTPCatchesEmailOutsideTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p payments
		rec := newRecorder(t)
		idemtest.HTTP(rec, p.service(b, func(env idemtest.Env) http.Handler {
			return mux("POST /payments", env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				tx, _ := idemhttp.SQLTx(ctx)
				key := idemhttp.Key(ctx)
				if _, err := tx.ExecContext(ctx, `INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`, key); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				p.mailer.Add(1) // the bug: an e-mail is not rolled back
				created(w, key, 1)
			})))
		}), payCase)
		rec.mustFailWith(t, "process crashed after the handler's writes", "receipt e-mails sent for",
			"not a write on the request transaction", "an e-mail")
	})
}

// A charge counter in front of the middleware counts every request,
// replays included.
func TestHTTPCatchesCounterBeforeClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p payments
		rec := newRecorder(t)
		idemtest.HTTP(rec, p.service(b, func(env idemtest.Env) http.Handler {
			inner := env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				tx, _ := idemhttp.SQLTx(ctx)
				if _, err := tx.ExecContext(ctx, `INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`, idemhttp.Key(ctx)); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				created(w, idemhttp.Key(ctx), 1)
			}))
			return mux("POST /payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p.mailer.Add(1) // the bug: before the key is claimed
				inner.ServeHTTP(w, r)
			}))
		}), payCase)
		rec.mustFailWith(t, `scenario "sequential retry"`, "2 receipt e-mails sent for 1 payments", "in front of env.Idempotent")
	})
}

// The payment is written on a second connection (env.DB) instead of the
// request transaction: on SQLite the write waits for the transaction's
// lock and fails; on PostgreSQL it commits alone and a retry after a
// rolled-back attempt pays twice.
func TestHTTPCatchesWriteOnSecondConnection(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p payments
		rec := newRecorder(t)
		idemtest.HTTP(rec, p.service(b, func(env idemtest.Env) http.Handler {
			return mux("POST /payments", env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				tx, _ := idemhttp.SQLTx(ctx)
				key := idemhttp.Key(ctx)
				// the bug: env.DB, not tx
				if _, err := env.DB.ExecContext(ctx, q(env.DB.Dialect, `INSERT INTO payments (idem_key, amount) VALUES ($1, 1)`), key); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				if _, err := tx.ExecContext(ctx, q(env.DB.Dialect, `INSERT INTO mails (idem_key) VALUES ($1)`), key); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				created(w, key, 1)
			})))
		}), payCase)
		if b.PostgresURL == "" && b.Open == nil { // SQLite
			rec.mustFailWith(t, "attempt 1 answered 500", "a write on another connection")
			return
		}
		rec.mustFailWith(t, "process crashed after the handler's writes", "receipt e-mails sent for", "a write on another connection (env.DB)")
	})
}

// A route that is not behind the middleware executes every retry.
func TestHTTPCatchesRouteWithoutMiddleware(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p payments
		rec := newRecorder(t)
		idemtest.HTTP(rec, p.service(b, func(env idemtest.Env) http.Handler {
			return mux("POST /payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				created(w, r.Header.Get(idemhttp.HeaderKey), 1)
			}))
		}), payCase)
		rec.mustFailWith(t, `scenario "sequential retry"`, "want a replay of attempt 1", "behind env.Idempotent")
	})
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
			idemtest.HTTP(tb, idemtest.Service{Handler: func(idemtest.Env) http.Handler { return http.NotFoundHandler() }}, payCase)
		},
		"no cases": func(tb testing.TB) {
			var p payments
			idemtest.HTTP(tb, p.service(idemtest.Backend{}, func(idemtest.Env) http.Handler { return http.NotFoundHandler() }))
		},
		"two-phase": func(tb testing.TB) {
			var p payments
			svc := p.service(idemtest.Backend{}, func(idemtest.Env) http.Handler { return http.NotFoundHandler() })
			svc.Config.Mode = idemhttp.TwoPhase
			idemtest.HTTP(tb, svc, payCase)
		},
	} {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder(t)
			run(rec)
			rec.mustFailWith(t, "idemtest.HTTP: ")
		})
	}
}
