package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// Write an order and its event in one transaction; the relay publishes the
// event after commit, with the event id as the broker message id.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-outbox-example-*")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "app.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	defer d.Close()
	_ = migrate.Up(ctx, d)
	_, _ = d.Pool().Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total integer)`)

	ob, _ := outbox.New(d, outbox.Config{Source: "/shop/orders"})
	b, _ := memory.New(memory.Config{})
	defer b.Close()
	relay, _ := outbox.NewRelay(d, b.Publisher(), outbox.RelayConfig{PollInterval: 50 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	err := store.InTx(ctx, d, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('order-42', 1200)`); err != nil {
			return err
		}
		_, err := ob.EnqueueTx(ctx, tx, outbox.Event{
			Type:    "shop.order.created",
			Subject: "order-42",
			Topic:   "orders",
			Key:     "order-42", // events of one order are published in order
			Payload: []byte(`{"id":"order-42","total":1200}`),
		})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	relay.Notify() // SQLite: wake the in-process relay after commit

	for len(b.Messages("orders")) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	m := b.Messages("orders")[0]
	fmt.Println(m.Headers["ce-type"], m.Headers["ce-source"], m.Key, string(m.Payload))
	st, _ := ob.Stats(ctx)
	fmt.Println("pending:", st.Pending)
	// Output:
	// shop.order.created /shop/orders order-42 {"id":"order-42","total":1200}
	// pending: 0
}
