package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// On SQLite every idem part runs on the caller's *sql.Tx: the order and
// its event commit together, and a transaction that fails leaves neither.
// idem's tables carry the prefix idem_ (Driver.Table gives the name).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlstore-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "shop.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}
	if _, err := d.DB().ExecContext(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		panic(err)
	}
	ob, err := outbox.New(d, outbox.Config{Source: "/shop"})
	if err != nil {
		panic(err)
	}

	placeOrder := func(id string, fail bool) error {
		return store.InTx(ctx, d, func(tx *sql.Tx) error { // BEGIN IMMEDIATE … COMMIT, or ROLLBACK
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
				return err
			}
			if _, err := ob.EnqueueTx(ctx, tx, outbox.Event{Type: "order.created", Topic: "orders", Key: id, Payload: []byte(`{}`)}); err != nil {
				return err
			}
			if fail {
				return errors.New("card declined")
			}
			return nil
		})
	}
	fmt.Println(placeOrder("order-1", false))
	fmt.Println(placeOrder("order-2", true))

	var orders int
	_ = d.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders)
	var pending int // the events the relay has still to publish, in idem's table
	_ = d.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE state = 'pending'`).Scan(&pending)
	fmt.Println(d.Table("outbox"), "orders:", orders, "pending events:", pending)
	// Output:
	// <nil>
	// card declined
	// idem_outbox orders: 1 pending events: 1
}
