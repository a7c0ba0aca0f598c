package idemjetstream_test

import (
	"context"
	"fmt"
	"os"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/broker/idemjetstream/embedded"
)

// Publish an event twice (a relay retry) to an embedded JetStream server and
// consume it once: the stream's duplicate window drops the second copy.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example-*")
	defer os.RemoveAll(dir)

	srv, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()

	nc, j, err := idemjetstream.Dial(srv.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()

	_, _ = idemjetstream.EnsureStream(ctx, j, js.StreamConfig{Name: "ORDERS", Subjects: []string{"order-events"}})
	pub, _ := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	evt := idem.Message{ID: "evt-1", Subject: "order-events", Key: "order-42", Payload: []byte(`{"order":42}`)}
	_ = pub.Publish(ctx, evt)
	res, _ := pub.PublishResults(ctx, evt) // the relay crashed before marking: same id again
	fmt.Println("duplicate:", res[0].Duplicate)

	sub, _ := idemjetstream.NewSubscriber(ctx, j, idemjetstream.SubscriberConfig{Stream: "ORDERS", Durable: "billing"})
	ds, _ := sub.Fetch(ctx, 10, 500*time.Millisecond)
	for _, d := range ds {
		m := d.Message()
		fmt.Println(m.ID, m.Key, m.Attempt, m.Position)
		_ = d.Ack(ctx) // after the handler's transaction committed
	}
	// Output:
	// duplicate: true
	// evt-1 order-42 1 1
}
