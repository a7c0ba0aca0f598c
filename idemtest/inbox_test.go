package idemtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/inbox"
)

// deposits is the consumer under test: each message deposits an amount;
// its payload carries the producer's own reference as "id".
type deposits struct {
	mailer atomic.Int64 // notifications sent outside any transaction
}

type deposit struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func (p *deposits) setup(ctx context.Context, db idemtest.DB) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE deposits (message_id VARCHAR(255) NOT NULL, amount INTEGER NOT NULL)`)
	return err
}

// invariant: one deposit row per applied message, keyed by its id, and
// nothing else; one notification per deposit at most queued or sent.
func (p *deposits) invariant(ctx context.Context, db idemtest.DB, applied []idem.Message) error {
	for _, m := range applied {
		var n int
		if err := db.QueryRowContext(ctx, q(db.Dialect, `SELECT COUNT(*) FROM deposits WHERE message_id = $1`), m.ID).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("message %s has %d deposit rows, want 1", m.ID, n)
		}
	}
	var total int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM deposits`).Scan(&total); err != nil {
		return err
	}
	if total != len(applied) {
		return fmt.Errorf("%d deposit rows for %d applied messages", total, len(applied))
	}
	if sent := int(p.mailer.Load()); sent != 0 && sent != len(applied) {
		return fmt.Errorf("%d notifications sent for %d deposits", sent, len(applied))
	}
	return nil
}

func (p *deposits) consumer(h func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx]) idemtest.Consumer {
	return idemtest.Consumer{Setup: p.setup, Invariant: p.invariant, Handler: h}
}

// applyDeposit is the correct handler: the row on tx, keyed by msg.ID.
func applyDeposit(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
		var d deposit
		if err := json.Unmarshal(msg.Payload, &d); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, q(env.DB.Dialect, `INSERT INTO deposits (message_id, amount) VALUES ($1, $2)`), msg.ID, d.Amount)
		return err
	}
}

var depositMsgs = []idem.Message{
	{ID: "m1", Subject: "deposits", Payload: []byte(`{"id":"ref-1","amount":10}`)},
	{ID: "m2", Subject: "deposits", Payload: []byte(`{"id":"ref-2","amount":20}`)},
	{ID: "m3", Subject: "deposits", Payload: []byte(`{"id":"ref-3","amount":30}`)},
}

func TestInboxPassesCorrectHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p deposits
		rec := newRecorder(t)
		c := p.consumer(applyDeposit)
		c.Backend = b
		idemtest.Inbox(rec, c, depositMsgs...)
		if rec.Failed() {
			t.Fatalf("idemtest failed a correct handler:\n%s", rec.output())
		}
	})
}

// The handler records the producer's reference from the payload as the
// message id, instead of the envelope's msg.ID.
func TestInboxCatchesMessageIDFromPayload(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p deposits
		rec := newRecorder(t)
		c := p.consumer(func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
			return func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
				var d deposit
				if err := json.Unmarshal(msg.Payload, &d); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO deposits (message_id, amount) VALUES ($1, $2)`, d.ID, d.Amount) // the bug
				return err
			}
		})
		c.Backend = b
		idemtest.Inbox(rec, c, depositMsgs...)
		rec.mustFailWith(t, `scenario "in order"`, "has 0 deposit rows, want 1", "not on an id read from the payload")
	})
}

// The notification is sent from the handler, outside the transaction: a
// delivery rolled back at commit has sent it, the redelivery sends it
// again.
func TestInboxCatchesNotificationOutsideTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b idemtest.Backend) {
		var p deposits
		rec := newRecorder(t)
		c := p.consumer(func(env idemtest.ConsumerEnv) inbox.Handler[*sql.Tx] {
			apply := applyDeposit(env)
			return func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
				if err := apply(ctx, tx, msg); err != nil {
					return err
				}
				p.mailer.Add(1) // the bug
				return nil
			}
		})
		c.Backend = b
		idemtest.Inbox(rec, c, depositMsgs...)
		rec.mustFailWith(t, "redelivery after the commit failed", "notifications sent for", "an effect outside the inbox's transaction")
	})
}
