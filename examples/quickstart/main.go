// Command quickstart is the README's quick start as a complete program: an
// idempotent consumer on PostgreSQL (pgx) that creates one invoice per order
// however often the broker delivers the order's event.
//
//	go run ./examples/quickstart postgres://postgres@127.0.0.1:5432/test
//
// The deliveries come from a slice here; with a real broker they come from
// its subscription, and Ack/Nak are the broker's.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// delivery is what a broker hands the consumer: a message and how to settle it.
type delivery struct {
	msg idem.Message
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: quickstart postgres://user@host:5432/db")
		os.Exit(2)
	}
	invoices, err := run(context.Background(), os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoices:", invoices)
}

// run consumes three deliveries of two events (one is redelivered) and
// returns how many invoices exist afterwards: two.
func run(ctx context.Context, dbURL string) (int, error) {
	d, err := pgxstore.Open(ctx, dbURL, pgxstore.Config{})
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil { // idem's tables, in schema "idem"
		return 0, fmt.Errorf("migrate: %w", err)
	}
	// The business table. UNIQUE is the business's own guard; the inbox is
	// what keeps a redelivery from even trying again.
	if _, err := d.PgxPool().Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (
		order_id text PRIMARY KEY,
		amount_cents bigint NOT NULL)`); err != nil {
		return 0, fmt.Errorf("create invoices: %w", err)
	}
	ib, err := inbox.New(d, inbox.Config{}) // records (consumer, message id)
	if err != nil {
		return 0, err
	}

	handler := invoice(d) // your business write, below

	deliveries := []delivery{
		{idem.Message{ID: "evt-1", Key: "order-1", Payload: []byte(`{"order_id":"order-1"}`)}},
		{idem.Message{ID: "evt-2", Key: "order-2", Payload: []byte(`{"order_id":"order-2"}`)}},
		{idem.Message{ID: "evt-1", Key: "order-1", Payload: []byte(`{ "order_id": "order-1" }`)}}, // redelivered
	}
	for _, dl := range deliveries { // any broker
		res, err := ib.Process(ctx, "billing", dl.msg, handler)
		switch {
		case err == nil: // inbox.Processed or inbox.Duplicate: committed, now ack
			fmt.Printf("%s: %s, ack\n", dl.msg.ID, res)
		case errors.Is(err, idem.ErrFingerprintMismatch): // same id, other payload
			fmt.Printf("%s: dead letter: %v\n", dl.msg.ID, err)
		default: // transient: nak, the broker redelivers later
			fmt.Printf("%s: nak: %v\n", dl.msg.ID, err)
		}
	}

	var n int
	if err := d.PgxPool().QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}

// invoice is the consumer's business write: one invoice per order, on tx,
// the transaction that records the message in the inbox. An error rolls
// back both, so the redelivery is processed. ON CONFLICT is the business's
// own guard: a second event about an order already invoiced (another
// message id) changes nothing. It is generic over the transaction type so
// the same handler runs on pgx (pgx.Tx) here and on database/sql in its
// idemtest check.
func invoice[TTx any](d store.Driver[TTx]) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg idem.Message) error {
		_, err := d.Tx(tx).Exec(ctx, `INSERT INTO invoices (order_id, amount_cents) VALUES ($1, 9000)
			ON CONFLICT (order_id) DO NOTHING`, msg.Key)
		return err
	}
}
