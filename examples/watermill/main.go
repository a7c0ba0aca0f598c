// Command watermill is a Watermill service that processes each order once
// with idem: the billing handler runs under idemwatermill's middleware on
// SQLite, writes an invoice and returns an "invoice.created" event that
// goes to idem's outbox in the same transaction; idem's relay publishes it
// through the Watermill publisher to the mailer handler, which also runs
// once per event. The orders are delivered four times (a crash after the
// first invoice's write, a redelivery) and still make two invoices and two
// e-mails.
//
//	go run . [-db path/to.db]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemwatermill"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"

	_ "modernc.org/sqlite" // the SQLite database/sql driver (the core module links none)
)

func main() {
	db := flag.String("db", "", "SQLite database file (default: a new temporary one)")
	flag.Parse()
	path := *db
	if path == "" {
		dir, err := os.MkdirTemp("", "idem-watermill-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "example.db")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := run(ctx, path, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Result is what one run left in the database.
type Result struct{ Invoices, Emails int }

// run delivers the orders through a Watermill router and returns the
// invoices and e-mails in the database once the mailer has seen every
// invoice event.
func run(ctx context.Context, path string, out io.Writer) (Result, error) {
	quiet := slog.New(slog.DiscardHandler)
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		return Result{}, err
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		return Result{}, err
	}
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS invoices (order_id text NOT NULL, amount_cents integer NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS emails (invoice_event text NOT NULL)`,
	} {
		if _, err := d.Pool().Exec(ctx, ddl); err != nil {
			return Result{}, err
		}
	}

	ib, err := inbox.New(d, inbox.Config{Logger: quiet})
	if err != nil {
		return Result{}, err
	}
	ob, err := outbox.New(d, outbox.Config{Source: "/billing", Logger: quiet})
	if err != nil {
		return Result{}, err
	}
	events, err := idemwatermill.NewPublisher(d, ob, idemwatermill.PublisherConfig{})
	if err != nil {
		return Result{}, err
	}
	once, err := idemwatermill.Middleware(ib, idemwatermill.Config[*sql.Tx]{Outbox: events, Logger: quiet})
	if err != nil {
		return Result{}, err
	}

	// The transport: any Watermill Pub/Sub. This gochannel returns from
	// Publish once the message is acknowledged, so the run is
	// deterministic.
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubsub.Close()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return Result{}, err
	}
	var crashed atomic.Bool
	billing := router.AddHandler("billing", "orders", pubsub, "invoices", events, func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := idemwatermill.TxFromContext[*sql.Tx](msg.Context())
		if _, err := tx.ExecContext(msg.Context(), `INSERT INTO invoices (order_id, amount_cents) VALUES ($1, $2)`,
			msg.Metadata.Get("order"), 9000); err != nil {
			return nil, err
		}
		if crashed.CompareAndSwap(false, true) {
			return nil, errors.New("simulated crash after the invoice's write") // rolled back; the router nacks
		}
		ev := message.NewMessage("invoice-created:"+msg.Metadata.Get("order"), msg.Payload)
		ev.Metadata.Set("order", msg.Metadata.Get("order"))
		return []*message.Message{ev}, nil // to the outbox, in this transaction
	})
	billing.AddMiddleware(once)
	mailer := router.AddNoPublisherHandler("mailer", "invoices", pubsub, func(msg *message.Message) error {
		tx, _ := idemwatermill.TxFromContext[*sql.Tx](msg.Context())
		_, err := tx.ExecContext(msg.Context(), `INSERT INTO emails (invoice_event) VALUES ($1)`, msg.UUID)
		return err // an e-mail provider would be called through idem's effect ledger
	})
	mailer.AddMiddleware(once)

	// idem's relay publishes committed outbox events through the Watermill
	// publisher.
	relay, err := outbox.NewRelay(d, idemwatermill.NewRelayPublisher(pubsub, idemwatermill.RelayPublisherConfig{}),
		outbox.RelayConfig{PollInterval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		return Result{}, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	go func() { done <- router.Run(rctx) }()
	go func() { done <- idem.Run(rctx, relay) }()
	<-router.Running()

	deliveries := []struct{ uuid, order string }{
		{"order-placed-1", "o-1"}, // crashes once, redelivered
		{"order-placed-1", "o-1"}, // a redelivery after the commit: a duplicate
		{"order-placed-2", "o-2"},
		{"order-placed-2", "o-2"},
	}
	for _, dv := range deliveries {
		msg := message.NewMessage(dv.uuid, []byte(`{"order":"`+dv.order+`"}`))
		msg.Metadata.Set("order", dv.order)
		if err := pubsub.Publish("orders", msg); err != nil {
			return Result{}, err
		}
	}

	var res Result
	for {
		res, err = counts(ctx, d)
		if err != nil || res.Emails >= res.Invoices {
			break
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("the mailer saw %d of %d invoice events: %w", res.Emails, res.Invoices, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	for range 2 {
		if rerr := <-done; rerr != nil && err == nil {
			err = rerr
		}
	}
	fmt.Fprintf(out, "%d deliveries of 2 orders: %d invoices, %d e-mails\n", len(deliveries), res.Invoices, res.Emails)
	return res, err
}

func counts(ctx context.Context, d store.Driver[*sql.Tx]) (r Result, err error) {
	if err = d.Pool().QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&r.Invoices); err != nil {
		return r, err
	}
	err = d.Pool().QueryRow(ctx, `SELECT count(*) FROM emails`).Scan(&r.Emails)
	return r, err
}
