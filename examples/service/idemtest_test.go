package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
	"net/http"
	"os"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/idemtest/fakeprovider"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// backends are the databases idemtest runs the service's handlers on:
// SQLite always, PostgreSQL when its test URL is set, and MariaDB for the
// handlers that touch no table of the service's own (its DDL is
// PostgreSQL's and SQLite's, the databases the service runs on).
func backends(mysql bool) map[string]idemtest.Backend {
	b := map[string]idemtest.Backend{"sqlite": {}}
	if u := os.Getenv("IDEM_TEST_POSTGRES_URL"); u != "" {
		b["postgres"] = idemtest.Backend{PostgresURL: u}
	}
	if u := os.Getenv("IDEM_TEST_MYSQL_URL"); u != "" && mysql {
		b["mysql"] = idemmysqltest.BackendAt(u)
	}
	return b
}

func createPayments(ctx context.Context, db idemtest.DB) error {
	_, err := db.ExecContext(ctx, paymentsTable)
	return err
}

// TestCreatePaymentIsEffectivelyOnce runs POST /payments through idemtest:
// retries, racing duplicates, lost responses and a failure at each step of
// the key's transaction leave one payment and one payment.created event
// per key.
func TestCreatePaymentIsEffectivelyOnce(t *testing.T) {
	for name, b := range backends(false) {
		t.Run(name, func(t *testing.T) {
			var st store.Driver[*sql.Tx] // the store the handler was wired with, for the invariant's table name
			idemtest.HTTP(t, idemtest.Service{
				Backend: b,
				Setup:   createPayments,
				Handler: func(env idemtest.Env) http.Handler {
					st = env.Store
					ob, err := outbox.New(env.Store, outbox.Config{Source: "/payments"})
					if err != nil {
						panic(err)
					}
					return env.Idempotent(createPayment(env.Store, ob, "payments.created"))
				},
				Invariant: func(ctx context.Context, db idemtest.DB) error {
					var payments, events int
					if err := db.QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&payments); err != nil {
						return err
					}
					if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+st.Table("outbox")+` WHERE type = 'payment.created'`).Scan(&events); err != nil {
						return err
					}
					if events != payments {
						return fmt.Errorf("%d payments but %d payment.created events: each payment must have exactly one", payments, events)
					}
					return nil
				},
			}, idemtest.Case{Path: "/payments", Body: `{"amount":1200,"currency":"EUR"}`, Status: http.StatusCreated})
		})
	}
}

// TestScheduleChargeIsEffectivelyOnce runs the consumer's handler through
// idemtest: duplicates, redeliveries after a failed commit, out-of-order
// and concurrent deliveries schedule one charge per payment.
func TestScheduleChargeIsEffectivelyOnce(t *testing.T) {
	msgs := []idem.Message{
		{ID: "evt-1", Subject: "payments.created", Payload: []byte(`{"id":"pay_1","amount":1200,"currency":"EUR"}`)},
		{ID: "evt-2", Subject: "payments.created", Payload: []byte(`{"id":"pay_2","amount":700,"currency":"EUR"}`)},
	}
	for name, b := range backends(true) {
		t.Run(name, func(t *testing.T) {
			var st store.Driver[*sql.Tx]
			idemtest.Inbox(t, idemtest.Consumer{
				Backend: b,
				Name:    "charges",
				Handler: func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
					st = env.Store
					ledger, err := effect.New(env.Store, effect.Config{})
					if err != nil {
						panic(err)
					}
					return scheduleCharge(ledger)
				},
				Invariant: func(ctx context.Context, db idemtest.DB, applied []idem.Message) error {
					payments := map[string]bool{}
					for _, m := range applied {
						var p payment
						if err := json.Unmarshal(m.Payload, &p); err != nil {
							return err
						}
						payments[p.ID] = true
					}
					var charges int
					if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+st.Table("effects")+` WHERE kind = 'charge'`).Scan(&charges); err != nil {
						return err
					}
					if charges != len(payments) {
						return fmt.Errorf("%d charges scheduled for %d payments: want one each", charges, len(payments))
					}
					return nil
				},
			}, msgs...)
		})
	}
}

// TestChargeIsEffectivelyOnce runs the worker's provider call through
// idemtest: a crash between the provider's charge and the ledger's record,
// and a lease lost mid-call, charge the customer once.
func TestChargeIsEffectivelyOnce(t *testing.T) {
	idemtest.Effect(t, idemtest.EffectCall{Call: func(provider *fakeprovider.Client) effect.CallFunc {
		perform := charge(provider)
		req, _ := json.Marshal(fakeprovider.ChargeRequest{Amount: 1200, Currency: "EUR", Reference: "pay_1"})
		return func(ctx context.Context, key string) ([]byte, error) { return perform(ctx, key, req) }
	}})
}
