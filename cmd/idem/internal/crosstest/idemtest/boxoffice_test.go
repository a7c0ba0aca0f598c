package idemtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/idemtestcase"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// The reference system's order creation (boxoffice.System.CreateOrderTx:
// seats, order and OrderConfirmed outbox event on the request transaction)
// passes: one order and one event per completed key, whatever the faults.
func TestHTTPPassesReferenceSystemOrders(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		rec := idemtestcase.NewRecorder(t)
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
			t.Fatalf("idemtest failed the reference system's handler:\n%s", rec.Report())
		}
	})
}

// orderConfirmed is the reference system's OrderConfirmed event for order
// n, as its relay publishes it.
func orderConfirmed(t *testing.T, n int) idem.Message {
	oc := boxoffice.OrderConfirmed{Order: boxoffice.Order{
		OrderID: fmt.Sprintf("ord_00000000-0000-4000-8000-%012d", n), Tenant: "acme", EventID: "concert-1",
		CustomerEmail: "ada@example.com", Seats: 1, TotalCents: 2500, Currency: "EUR", Status: "confirmed",
		CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}, SeatsLeft: int64(100 - n), EventVersion: int64(n)}
	payload, err := json.Marshal(oc)
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Event{ID: fmt.Sprintf("evt-%d", n), Source: "boxoffice/orders", Type: boxoffice.EventTypeOrderConfirmed,
		Subject: oc.OrderID, DataContentType: "application/json", Topic: boxoffice.Subject, Key: oc.OrderID, Payload: payload}.Message()
}

// The reference system's billing and notification consumers pass Inbox:
// one invoice, one confirmation e-mail row and one scheduled e-mail effect
// per order, however the events are delivered.
func TestInboxPassesReferenceSystemConsumers(t *testing.T) {
	msgs := []idem.Message{orderConfirmed(t, 1), orderConfirmed(t, 2), orderConfirmed(t, 3)}
	for _, consumer := range []string{"billing", "notification"} {
		t.Run(consumer, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b idemtest.Backend) {
				rec := idemtestcase.NewRecorder(t)
				idemtest.Inbox(rec, idemtest.Consumer{
					Backend: b,
					Name:    consumer,
					Handler: func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
						sys, err := boxoffice.New[*sql.Tx](context.Background(), env.Store, boxoffice.Config{
							Roles: []boxoffice.Role{boxoffice.RoleEffects}, ProviderURL: "http://127.0.0.1:9", // never called: nothing runs
						})
						if err != nil {
							t.Fatal(err)
						}
						if consumer == "billing" {
							return sys.Handlers().Billing
						}
						return sys.Handlers().Notification
					},
					Invariant: func(ctx context.Context, db idemtest.DB, applied []idem.Message) error {
						orders := map[string]bool{}
						for _, m := range applied {
							orders[m.Key] = true
						}
						prefix := "idem_"
						if db.Dialect == store.Postgres {
							prefix = ""
						}
						var invoices, emails, effects int
						err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM invoices), (SELECT COUNT(*) FROM outgoing_emails),
							(SELECT COUNT(*) FROM `+prefix+`effects)`).Scan(&invoices, &emails, &effects)
						if err != nil {
							return err
						}
						want := map[string]int{"billing": invoices, "notification": emails}[consumer]
						if want != len(orders) || (consumer == "notification" && effects != len(orders)) {
							return fmt.Errorf("%d invoices, %d e-mail rows, %d e-mail effects for %d orders", invoices, emails, effects, len(orders))
						}
						return nil
					},
				}, msgs...)
				if rec.Failed() {
					t.Fatalf("idemtest failed the reference system's %s consumer:\n%s", consumer, rec.Report())
				}
			})
		})
	}
}

// eachBackend runs body on SQLite, and on PostgreSQL and MySQL when their
// test URLs are set.
func eachBackend(t *testing.T, body func(t *testing.T, b idemtest.Backend)) {
	t.Run("sqlite", func(t *testing.T) { body(t, idemtest.Backend{}) })
	t.Run("postgres", func(t *testing.T) {
		u := os.Getenv("IDEM_TEST_POSTGRES_URL")
		if u == "" {
			t.Skip("IDEM_TEST_POSTGRES_URL is not set: skipping the PostgreSQL variant")
		}
		body(t, idemtest.Backend{PostgresURL: u})
	})
	t.Run("mysql", func(t *testing.T) { body(t, idemmysqltest.Backend(t)) })
}
