package idemtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/boxoffice"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/store"
)

// The reference system's order creation (boxoffice.System.CreateOrderTx:
// seats, order and OrderConfirmed outbox event on the request transaction)
// passes: one order and one event per completed key, whatever the faults.
func TestHTTPPassesReferenceSystemOrders(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		rec := newRecorder(t)
		idemtest.HTTP(rec, idemtest.Service{
			Backend: b,
			Handler: func(env idemtest.Env) http.Handler {
				sys, err := boxoffice.New[*sql.Tx](context.Background(), env.Store, boxoffice.Config{
					Roles: []boxoffice.Role{boxoffice.RoleEffects}, ProviderURL: "http://127.0.0.1:9", // never called: nothing runs
				})
				if err != nil {
					t.Fatal(err)
				}
				mux := http.NewServeMux()
				mux.Handle("POST /orders", env.Idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ctx := r.Context()
					tx, _ := idemhttp.SQLTx(ctx)
					var req boxoffice.OrderRequest
					if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
						http.Error(w, err.Error(), http.StatusBadRequest)
						return
					}
					oc, err := sys.CreateOrderTx(ctx, tx, "", req)
					if err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					_ = json.NewEncoder(w).Encode(oc.Order)
				})))
				return mux
			},
			Invariant: func(ctx context.Context, db idemtest.DB) error {
				prefix := "idem_"
				if db.Dialect == store.Postgres {
					prefix = "" // the test's schema is on the search_path
				}
				var orders, events, keys int
				err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM orders), (SELECT COUNT(*) FROM `+prefix+`outbox),
					(SELECT COUNT(*) FROM `+prefix+`idempotency_keys WHERE state = 'completed')`).Scan(&orders, &events, &keys)
				if err != nil {
					return err
				}
				if orders != keys || events != orders {
					return fmt.Errorf("%d orders, %d OrderConfirmed events for %d completed keys", orders, events, keys)
				}
				return nil
			},
		}, idemtest.Case{Name: "create order", Path: "/orders", Status: http.StatusCreated,
			Body: `{"event_id":"concert-1","customer_email":"ada@example.com","seats":2,"total_cents":5000,"currency":"EUR"}`})
		if rec.Failed() {
			t.Fatalf("idemtest failed the reference system's handler:\n%s", rec.output())
		}
	})
}
