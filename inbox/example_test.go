package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// A consumer processes a redelivered message once: the second delivery is
// reported as a duplicate and the handler does not run again.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)

	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "app.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}
	d.DB().ExecContext(ctx, `CREATE TABLE invoices (order_id text PRIMARY KEY)`)

	ib, _ := inbox.New(d, inbox.Config{})
	createInvoice := func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, msg.Key)
		return err
	}
	msg := idem.Message{ID: "evt-42", Key: "order-7", Payload: []byte(`{"order_id":"order-7"}`)}
	for attempt := 1; attempt <= 2; attempt++ { // the broker delivers twice
		res, err := ib.Process(ctx, "billing", msg, createInvoice)
		fmt.Println(attempt, res, err)
	}
	var n int
	d.DB().QueryRowContext(ctx, `SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	// Output:
	// 1 processed <nil>
	// 2 duplicate <nil>
	// invoices: 1
}

// A batch is recorded with one multi-row insert; each message gets its own
// outcome.
func ExampleInbox_ProcessBatch() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "app.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	defer d.Close()
	_ = migrate.Up(ctx, d)
	ib, _ := inbox.New(d, inbox.Config{})

	batch := []idem.Message{
		{ID: "a", Payload: []byte(`{"n":1}`)},
		{ID: "b", Payload: []byte(`{"n":2}`)},
		{ID: "a", Payload: []byte(`{"n":1}`)}, // redelivered inside the same fetch
	}
	out, err := ib.ProcessBatch(ctx, "projector", batch, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		return nil // apply the message with tx
	})
	for i, o := range out {
		fmt.Println(batch[i].ID, o.Result, o.Err)
	}
	fmt.Println(err)
	// Output:
	// a processed <nil>
	// b processed <nil>
	// a duplicate <nil>
	// <nil>
}
