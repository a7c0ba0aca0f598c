package idemamqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
)

// publishWithoutID publishes n messages with no message-id property (as
// producers other than idem may) to queue q through the default exchange.
func publishWithoutID(t *testing.T, url, q string, n int) {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, true, false,
			amqp091.Publishing{Body: fmt.Appendf(nil, "m-%d", i), DeliveryMode: amqp091.Persistent})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
			t.Fatalf("publish %d: confirmed %v, %v", i, ok, err)
		}
	}
}

// fetchN fetches until it holds n deliveries.
func fetchN(t *testing.T, sub *idemamqp.Subscriber, n int) []broker.Delivery {
	t.Helper()
	var out []broker.Delivery
	for range 20 {
		if len(out) == n {
			break
		}
		ds, err := sub.Fetch(context.Background(), n-len(out), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
	}
	if len(out) != n {
		t.Fatalf("fetched %d deliveries, want %d", len(out), n)
	}
	return out
}

// Messages without a message id do not share one attempt count: each is
// counted by its content, so a batch of them is each on attempt 1, a
// redelivered one counts its own deliveries (on a classic queue too, where
// the broker only flags a redelivery, so a poisonous message reaches its
// consumer's MaxAttempts), and acking the others does not reset it.
func TestAttemptWithoutMessageID(t *testing.T) {
	for _, tc := range []struct {
		name string
		args amqp091.Table
		// want is the attempt of the k-th redelivery (k from 1).
		want func(k int) int
	}{
		{"classic", nil, func(k int) int { return k + 1 }},
		{"quorum", amqp091.Table{"x-queue-type": "quorum"}, func(k int) int { return k + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			url := amqpURL(t)
			q := "idemtest.noid." + tc.name + "." + unique()
			if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q, Args: tc.args}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, q) })
			const n = 10
			publishWithoutID(t, url, q, n)
			sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q, AckWait: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()

			ds := fetchN(t, sub, n)
			for _, d := range ds {
				if m := d.Message(); m.ID != "" || m.Attempt != 1 {
					t.Errorf("%s (id %q) first delivery: attempt %d, want 1", m.Payload, m.ID, m.Attempt)
				}
			}
			// Requeue the first, and ack the others one at a time, each
			// after a redelivery of the first.
			poison, rest := ds[0], ds[1:]
			for k := 1; k <= 3; k++ {
				if err := poison.Nak(ctx, 0); err != nil {
					t.Fatal(err)
				}
				poison = fetchN(t, sub, 1)[0]
				if m := poison.Message(); m.Attempt != tc.want(k) {
					t.Errorf("%s redelivery %d: attempt %d, want %d", m.Payload, k, m.Attempt, tc.want(k))
				}
				if err := rest[k-1].Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := poison.Ack(ctx); err != nil {
				t.Fatal(err)
			}
			if err := sub.AckBatch(ctx, rest[3:]); err != nil {
				t.Fatal(err)
			}
		})
	}
}
