package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store/sqlstore"
)

// A service end to end, on SQLite and the in-memory broker: an order taken
// over HTTP with an Idempotency-Key (the client retries it), written with
// its event in one transaction; the relay publishes the event, the broker
// delivers it twice, and the billing consumer's inbox makes one invoice.
// idem.Run starts and stops the relay and the consumer together.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example-*")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, _ := sqlstore.OpenSQLite(filepath.Join(dir, "app.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	defer d.Close()
	_ = migrate.Up(ctx, d)
	_, _ = d.Pool().Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, item text)`)
	_, _ = d.Pool().Exec(ctx, `CREATE TABLE invoices (order_id text)`)
	quiet := slog.New(slog.DiscardHandler)

	// HTTP: the handler writes the order and its event on the request's
	// transaction, which idemhttp commits with the key's record.
	ob, _ := outbox.New(d, outbox.Config{Source: "/shop"})
	mw, _ := idemhttp.New(d, idemhttp.Config{Logger: quiet})
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.SQLTx(r.Context())
		id := "order-" + idemhttp.Key(r.Context())
		item, _ := io.ReadAll(r.Body)
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO orders VALUES ($1, $2)`, id, string(item)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := ob.EnqueueTx(r.Context(), tx, outbox.Event{Type: "shop.order.created", Topic: "orders", Key: id, Payload: []byte(id)}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, id)
	}))

	// The relay publishes committed events; the consumer invoices each
	// order once, however often the broker delivers its event.
	b, _ := memory.New(memory.Config{})
	defer b.Close()
	relay, _ := outbox.NewRelay(d, b.Publisher(), outbox.RelayConfig{PollInterval: 20 * time.Millisecond, Logger: quiet})
	sub, _ := b.Subscribe("orders", "billing")
	ib, _ := inbox.New(d, inbox.Config{})
	billing, _ := consumer.New(ib, sub, consumer.Config[*sql.Tx]{
		Name: "billing", FetchWait: 20 * time.Millisecond, Logger: quiet,
		Handler: func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES ($1)`, string(msg.Payload))
			return err
		},
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- idem.Run(runCtx, relay, billing) }()

	b.DuplicateNext(1) // the broker will deliver the event twice
	for range 2 {      // the client retries: its first response was lost
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("tee"))
		req.Header.Set("Idempotency-Key", "k1")
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Body.String(), "replayed:", rec.Header().Get("Idempotent-Replayed") == "true")
	}
	relay.Notify()
	for b.Stats().Acked < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	fmt.Println("run:", <-done)
	var orders, invoices int
	_ = d.Pool().QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders)
	_ = d.Pool().QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices)
	fmt.Println("orders:", orders, "invoices:", invoices)
	// Output:
	// 201 order-k1 replayed: false
	// 201 order-k1 replayed: true
	// run: <nil>
	// orders: 1 invoices: 1
}
