package consumer_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// A consumer on SQLite and the in-memory broker: the duplicate delivery is
// acknowledged without a second effect.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "consumer-example")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		panic(err)
	}
	_, _ = d.DB().Exec(`CREATE TABLE invoices (order_id text)`)

	b, _ := memory.New(memory.Config{})
	defer b.Close()
	sub, _ := b.Subscribe("order-events", "billing")
	ib, _ := inbox.New(d, inbox.Config{})
	c, err := consumer.New(ib, sub, consumer.Config[*sql.Tx]{
		Name:      "billing",
		FetchWait: 50 * time.Millisecond,
		Handler: func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES ($1)`, msg.ID)
			return err
		},
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = c.Run(runCtx); close(done) }()

	msg := idem.Message{ID: "order-42", Subject: "order-events", Payload: []byte(`{"total":10}`)}
	_ = b.Publisher().Publish(ctx, msg, msg) // delivered twice
	for b.Stats().Acked < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	var n int
	_ = d.DB().QueryRow(`SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	// Output: invoices: 1
}
