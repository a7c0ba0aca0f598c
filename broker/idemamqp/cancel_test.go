package idemamqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemamqp"
)

// When the broker cancels the consumer (basic.cancel: here the queue is
// deleted by another connection) amqp091 closes the deliveries but leaves
// the channel open. Fetch reports it once and then consumes the queue
// again: at once if it was declared again, else once it is.
func TestBrokerCancelledConsumerConsumesAgain(t *testing.T) {
	ctx := context.Background()
	url := amqpURL(t)
	q := "idemtest.cancel." + unique()
	declare := func() {
		t.Helper()
		if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q}); err != nil {
			t.Fatal(err)
		}
	}
	declare()
	t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, q) })
	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	// fetchID fetches until the message id arrives, and acks it; it
	// returns the last error of a Fetch.
	fetchID := func(id string) (bool, error) {
		var last error
		for range 20 {
			ds, err := sub.Fetch(ctx, 10, time.Second)
			if err != nil {
				last = err
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for _, d := range ds {
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
				if d.Message().ID == id {
					return true, last
				}
			}
		}
		return false, last
	}
	if err := pub.Publish(ctx, idem.Message{ID: "before", Subject: q}); err != nil {
		t.Fatal(err)
	}
	if ok, err := fetchID("before"); !ok {
		t.Fatalf("before the cancel: not fetched (last error %v)", err)
	}

	// Deleted and declared again at once: the next Fetch after the
	// consumer closed consumes again on the same channel.
	if err := idemamqp.DeleteQueue(url, q); err != nil {
		t.Fatal(err)
	}
	declare()
	if err := pub.Publish(ctx, idem.Message{ID: "redeclared", Subject: q}); err != nil {
		t.Fatal(err)
	}
	if ok, err := fetchID("redeclared"); !ok {
		t.Fatalf("after the queue was deleted and declared again: not fetched (last error %v)", err)
	}

	// Deleted and left missing for a while: Fetch fails (the next one
	// redials) until the queue is back.
	if err := idemamqp.DeleteQueue(url, q); err != nil {
		t.Fatal(err)
	}
	// The broker's basic.cancel reaches the subscriber: Fetch reports the
	// consumer closed, and then, the queue being missing, fails to consume.
	var err1 error
	for range 20 {
		if _, err1 = sub.Fetch(ctx, 10, time.Second); err1 != nil {
			break
		}
	}
	if !errors.Is(err1, broker.ErrUnavailable) {
		t.Fatalf("after the queue was deleted: Fetch returned %v, want broker.ErrUnavailable", err1)
	}
	if _, err := sub.Fetch(ctx, 10, time.Second); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("while the queue is missing: Fetch returned %v, want broker.ErrUnavailable", err)
	}

	declare()
	if err := pub.Publish(ctx, idem.Message{ID: "after", Subject: q}); err != nil {
		t.Fatal(err)
	}
	if ok, err := fetchID("after"); !ok {
		t.Fatalf("after the queue was declared again: the new message was not fetched (last error %v)", err)
	}
}
