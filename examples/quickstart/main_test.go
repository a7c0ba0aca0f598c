package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
)

// TestRun runs the quick start, as written, against a fresh PostgreSQL
// database: three deliveries of two events make two invoices, and a second
// run (a restarted consumer seeing every event again) makes none.
func TestRun(t *testing.T) {
	dbURL := testdb.PostgresDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for round := 1; round <= 2; round++ {
		n, err := run(ctx, dbURL)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n != 2 {
			t.Fatalf("round %d: %d invoices, want 2", round, n)
		}
	}
}

// TestInvoiceIsEffectivelyOnce proves the quick start's handler with
// idemtest: duplicates, redelivery after a failed commit, out of order and
// concurrent deliveries, and two events of one order make one invoice per
// order, on SQLite and (when IDEM_TEST_POSTGRES_URL is set) PostgreSQL.
func TestInvoiceIsEffectivelyOnce(t *testing.T) {
	backends := map[string]idemtest.Backend{"sqlite": {}}
	if u := os.Getenv("IDEM_TEST_POSTGRES_URL"); u != "" {
		backends["postgres"] = idemtest.Backend{PostgresURL: u}
	}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			idemtest.Inbox(t, idemtest.Consumer{
				Backend: b,
				Name:    "billing",
				Setup: func(ctx context.Context, db idemtest.DB) error {
					_, err := db.ExecContext(ctx, `CREATE TABLE invoices (order_id text PRIMARY KEY, amount_cents bigint NOT NULL)`)
					return err
				},
				Handler: func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] { return invoice(env.Store) },
				Invariant: func(ctx context.Context, db idemtest.DB, applied []idem.Message) error {
					orders := map[string]bool{}
					for _, m := range applied {
						orders[m.Key] = true
					}
					var n int
					if err := db.QueryRowContext(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
						return err
					}
					if n != len(orders) {
						return fmt.Errorf("%d invoices for %d orders: want one each", n, len(orders))
					}
					return nil
				},
			},
				idem.Message{ID: "evt-1", Key: "order-1", Payload: []byte(`{"order_id":"order-1"}`)},
				idem.Message{ID: "evt-2", Key: "order-2", Payload: []byte(`{"order_id":"order-2"}`)},
			)
		})
	}
}
