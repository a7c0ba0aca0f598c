package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
)

// A test broker that delivers the next message twice, as a real broker may.
func Example() {
	ctx := context.Background()
	b, _ := memory.New(memory.Config{AckWait: time.Second})
	defer b.Close()

	sub, _ := b.Subscribe("order-events", "billing")
	pub := b.Publisher()

	b.DuplicateNext(1)
	_ = pub.Publish(ctx, idem.Message{ID: "evt-1", Subject: "order-events", Key: "order-42", Payload: []byte(`{"order":42}`)})

	ds, _ := sub.Fetch(ctx, 10, 100*time.Millisecond)
	for _, d := range ds {
		m := d.Message()
		fmt.Println(m.ID, m.Key, m.Attempt, m.Position)
		_ = d.Ack(ctx) // after the handler's transaction committed
	}
	// Output:
	// evt-1 order-42 1 1
	// evt-1 order-42 1 2
}
