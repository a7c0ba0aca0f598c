package pgxstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// idem on the service's own pool: its tables live in schema "idem", and a
// handler writes on the pgx.Tx it is given, so its rows and the inbox
// record commit together. The broker delivers the message twice; the
// second delivery is reported as a duplicate and the handler does not run.
//
// This example needs a PostgreSQL server, so it has no Output comment: go
// test compiles it but does not run it. The inbox, outbox and idemhttp
// tests run the same code against IDEM_TEST_POSTGRES_URL.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/shop?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: "idem"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := migrate.Up(ctx, d); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (order_id text PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	createInvoice := func(ctx context.Context, tx pgx.Tx, msg idem.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, msg.Key)
		return err
	}
	msg := idem.Message{ID: "evt-42", Key: "order-7", Payload: []byte(`{"order_id":"order-7"}`)}
	for range 2 {
		res, err := ib.Process(ctx, "billing", msg, createInvoice)
		fmt.Println(res, err) // processed <nil>, then duplicate <nil>
	}
}
