package idemamqp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemamqp"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// A consumer of a RabbitMQ queue writing invoices to SQLite. RabbitMQ does
// not drop a republished message, so the relay's retry arrives again with
// the same message-id property: the inbox acknowledges it without a second
// invoice. A permanent failure is parked in the dead-letter store with the
// queue and delivery tag, then rejected without requeue. Messages are
// acknowledged only after the transaction.
//
// It needs a RabbitMQ server at $AMQP_URL (e.g.
// amqp://guest:guest@127.0.0.1:5672/); TestExample runs it when
// IDEM_TEST_AMQP_URL is set, and prints:
//
//	invoice for order-42
//	invoices: 1
//	dead letter: order-43 permanent from queue order-events-example delivery tag 3
func Example() {
	ctx := context.Background()
	url := os.Getenv("AMQP_URL")
	const queue = "order-events-example"
	_ = idemamqp.DeleteQueue(url, queue) // start empty
	if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: queue}); err != nil {
		panic(err)
	}
	defer idemamqp.DeleteQueue(url, queue)

	dir, _ := os.MkdirTemp("", "amqp-example")
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

	// The default exchange routes a message to the queue named by its
	// subject (its routing key).
	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	order42 := idem.Message{ID: "order-42", Subject: queue, Payload: []byte(`{"total":10}`)}
	order43 := idem.Message{ID: "order-43", Subject: queue, Payload: []byte(`{"total":-1}`)}
	if err := pub.Publish(ctx, order42, order42, order43); err != nil { // order-42 republished by a relay retry
		panic(err)
	}

	sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: queue})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	ib, _ := inbox.New(d, inbox.Config{})
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(ib, sub, consumer.Config[*sql.Tx]{
		Name: "billing",
		DLQ:  letters,
		Handler: func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
			if msg.ID == "order-43" {
				return idem.Permanent(errors.New("negative total"))
			}
			fmt.Println("invoice for", msg.ID)
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES ($1)`, msg.ID)
			return err
		},
	})
	if err != nil {
		panic(err)
	}
	// c.Run(ctx) is the usual loop; here the example drives the fetches
	// itself to stop after the three messages.
	for seen := 0; seen < 3; {
		ds, err := sub.Fetch(ctx, 10, 5*time.Second)
		if err != nil {
			panic(err)
		}
		c.Process(ctx, ds)
		seen += len(ds)
	}

	var n int
	_ = d.DB().QueryRow(`SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	ls, _ := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	for _, l := range ls {
		fmt.Println("dead letter:", l.MessageID, l.ErrorClass, "from queue", l.Headers["idem-origin-queue"],
			"delivery tag", l.Headers["idem-origin-delivery-tag"])
	}
}

// TestExample runs Example against RabbitMQ and checks what it prints (an
// Example cannot skip, so it has no Output comment of its own).
func TestExample(t *testing.T) {
	t.Setenv("AMQP_URL", amqpURL(t))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	func() {
		defer func() { os.Stdout = stdout }()
		Example()
	}()
	_ = w.Close()
	out, _ := io.ReadAll(r)
	want := "invoice for order-42\ninvoices: 1\ndead letter: order-43 permanent from queue order-events-example delivery tag 3\n"
	if string(out) != want {
		t.Errorf("Example printed\n%s\nwant\n%s", out, want)
	}
}
