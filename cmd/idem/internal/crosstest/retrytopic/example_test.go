package retrytopic_test

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemkafka"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/retrytopic"
	"github.com/idemkit/idem/inbox"
)

// A consumer of order-events with retry topics order-events-retry-1s, -4s,
// -16s and the dead-letter topic order-events-dlt, on Kafka.
func Example() {
	var (
		ctx   = context.Background()
		seeds = []string{"127.0.0.1:9092"}
		ib    *inbox.Inbox[*sql.Tx] // inbox.New(d, inbox.Config{}) on your driver d
	)
	pub, _ := idemkafka.NewPublisher(idemkafka.PublisherConfig{Brokers: seeds})
	r, _ := retrytopic.New(retrytopic.Config{Topic: "order-events", Publisher: pub}) // delays 1s, 4s, 16s
	for _, topic := range append([]string{"order-events"}, r.Topics()...) {
		_ = idemkafka.EnsureTopic(ctx, pub.Client(), topic, 6, 3)
	}
	cfg := consumer.Config[*sql.Tx]{
		Name:    "notification",
		Reroute: r, // failures go to the next retry topic, then the DLT
		Handler: func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
			return nil // apply the event with tx
		},
	}
	main, _ := idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: seeds, Group: "notification", Topics: []string{"order-events"}})
	first, _ := consumer.New(ib, main, cfg)
	// The retry consumers, and last the consumer of order-events-dlt that
	// parks its records in the dead-letter store (idem dlq list / redrive).
	retries, _ := retrytopic.Consumers(ib, r, cfg, func(topic string, delay time.Duration) (broker.Subscriber, error) {
		// One group per retry topic (and one for the DLT, delay 0); the ack
		// wait exceeds the delay.
		return idemkafka.NewSubscriber(idemkafka.SubscriberConfig{Brokers: seeds, Group: "notification-" + topic,
			Topics: []string{topic}, AckWait: delay + 30*time.Second})
	})
	_ = retrytopic.Run(ctx, append([]*consumer.Consumer[*sql.Tx]{first}, retries...)...)
}
