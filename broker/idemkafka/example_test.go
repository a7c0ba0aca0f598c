package idemkafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// A consumer of a Kafka topic (here an in-process kfake cluster) writing
// invoices to SQLite. Kafka does not drop a republished record, so the
// relay's retry arrives as a second record with the same idem-id header:
// the inbox acknowledges it without a second invoice. A permanent failure
// is parked in the dead-letter store with the record's topic, partition
// and offset. Offsets are committed only after the transaction.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs() // a real cluster: "host:9092", …

	dir, _ := os.MkdirTemp("", "kafka-example")
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

	pub, err := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: seeds})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	if err := idemkafka.EnsureTopic(ctx, pub.Client(), "order-events", 1, 1); err != nil {
		panic(err)
	}
	order42 := idem.Message{ID: "order-42", Subject: "order-events", Key: "42", Payload: []byte(`{"total":10}`)}
	order43 := idem.Message{ID: "order-43", Subject: "order-events", Key: "43", Payload: []byte(`{"total":-1}`)}
	if err := pub.Publish(ctx, order42, order42, order43); err != nil { // order-42 republished by a relay retry
		panic(err)
	}

	sub, err := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: seeds, Group: "billing", Topics: []string{"order-events"}})
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
			fmt.Println("invoice for", msg.ID, "at partition/offset", msg.Position)
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES ($1)`, msg.ID)
			return err
		},
	})
	if err != nil {
		panic(err)
	}
	// c.Run(ctx) is the usual loop; here the example drives the fetches
	// itself to stop after the three records.
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
		fmt.Println("dead letter:", l.MessageID, l.ErrorClass, "from", l.Headers["idem-origin-topic"],
			"partition", l.Headers["idem-origin-partition"], "offset", l.Headers["idem-origin-offset"])
	}
	// Output:
	// invoice for order-42 at partition/offset 0/0
	// invoices: 1
	// dead letter: order-43 permanent from order-events partition 0 offset 2
}
