package idemtest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// testPaymentsOnce is what a team writes: POST /payments charges once per
// key. The handler writes on the request transaction; the invariant is one
// payment row per key. (TestExampleHTTP runs it.)
func testPaymentsOnce(t *testing.T) {
	idemtest.HTTP(t, idemtest.Service{
		Setup: func(ctx context.Context, db idemtest.DB) error {
			_, err := db.ExecContext(ctx, `CREATE TABLE payments (idem_key VARCHAR(255) NOT NULL, amount INTEGER NOT NULL)`)
			return err
		},
		Handler: func(env idemtest.Env) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /payments", env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tx, _ := idemhttp.SQLTx(r.Context())
				if _, err := tx.ExecContext(r.Context(), `INSERT INTO payments (idem_key, amount) VALUES ($1, 100)`, idemhttp.Key(r.Context())); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})))
			return mux
		},
		Invariant: func(ctx context.Context, db idemtest.DB) error {
			var dup int
			err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT idem_key FROM payments GROUP BY idem_key HAVING COUNT(*) > 1) d`).Scan(&dup)
			if err == nil && dup > 0 {
				err = errors.New("a key has more than one payment")
			}
			return err
		},
	}, idemtest.Case{Path: "/payments", Body: `{"amount":100}`, Status: http.StatusCreated})
}

// This file is the example: a test of a payments API with idemtest.HTTP.
func ExampleHTTP() {}
