package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// The business: a payment row per Idempotency-Key (UNIQUE is the
// business's own guard behind idemhttp's), its payment.created event, and
// the charge that event schedules. The example has one tenant (idemhttp's
// default); a service with several clients sets idemhttp.Config.Tenant and
// makes the business key (tenant, key).

// paymentsTable is the business table, in the connection's default schema
// (idem's own tables are in schema "idem" on PostgreSQL).
const paymentsTable = `CREATE TABLE IF NOT EXISTS payments (
	id text PRIMARY KEY,
	idempotency_key text NOT NULL UNIQUE,
	amount bigint NOT NULL,
	currency text NOT NULL)`

// payment is the request body, the row and the event payload.
type payment struct {
	ID       string `json:"id,omitempty"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// createPayment is POST /payments, run by idemhttp inside the key's
// transaction: the row, the outbox event and the stored 201 commit
// together or not at all. A 5xx is not stored and rolls everything back.
func createPayment[TTx any](d store.Driver[TTx], ob *outbox.Outbox[TTx], subject string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, ok := idemhttp.Tx[TTx](ctx) // pgx.Tx on PostgreSQL, *sql.Tx on SQLite
		var p payment
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Amount <= 0 || len(p.Currency) != 3 {
			idemhttp.WriteProblem(w, r, &idemhttp.Problem{Type: "about:blank", Title: "Invalid payment",
				Status: http.StatusBadRequest, Detail: `the body must be {"amount":>0,"currency":"EUR"}`})
			return
		}
		p.ID = "pay_" + rand.Text()
		body, _ := json.Marshal(p)
		if !ok {
			http.Error(w, "no request transaction", http.StatusInternalServerError)
			return
		}
		if _, err := d.Tx(tx).Exec(ctx, `INSERT INTO payments (id, idempotency_key, amount, currency) VALUES ($1, $2, $3, $4)`,
			p.ID, idemhttp.Key(ctx), p.Amount, p.Currency); err != nil {
			http.Error(w, "payment not recorded; retry with the same Idempotency-Key", http.StatusInternalServerError)
			return
		}
		if _, err := ob.EnqueueTx(ctx, tx, outbox.Event{Type: "payment.created", Topic: subject, Key: p.ID,
			DataContentType: "application/json", Payload: body}); err != nil {
			http.Error(w, "payment not recorded; retry with the same Idempotency-Key", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/"+p.ID)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}
}

// scheduleCharge is the consumer's handler: it schedules the payment's
// charge in the transaction that records the event in the inbox, under the
// key "charge:<payment id>" (the provider's idempotency key).
func scheduleCharge[TTx any](ledger *effect.Ledger[TTx]) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg idem.Message) error {
		var p payment
		if err := json.Unmarshal(msg.Payload, &p); err != nil {
			return idem.Permanent(err) // dead-lettered: a retry cannot fix it
		}
		req, _ := json.Marshal(fakeprovider.ChargeRequest{Amount: p.Amount, Currency: p.Currency, Reference: p.ID})
		_, _, err := ledger.ScheduleTx(ctx, tx, effect.Effect{Key: "charge:" + p.ID, Kind: "charge", Payload: req})
		return err
	}
}

// charge is the effect worker's performer: one POST /charges with the
// effect's key as Idempotency-Key, so a call repeated after a crash is
// answered from the provider's record instead of charging twice.
func charge(client *fakeprovider.Client) effect.Performer {
	return func(ctx context.Context, key string, payload []byte) ([]byte, error) {
		var req fakeprovider.ChargeRequest
		if err := json.Unmarshal(payload, &req); err != nil {
			return nil, idem.Permanent(err)
		}
		res, err := client.Charge(ctx, key, req)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	}
}
