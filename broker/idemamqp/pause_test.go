package idemamqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemamqp"
)

// readyCount is the queue's count of messages ready for delivery (not
// pushed to a consumer).
func readyCount(t *testing.T, url, q string) int {
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
	defer ch.Close()
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return info.Messages
}

// queueOf declares a queue holding n messages and subscribes to it with
// prefetch.
func queueOf(t *testing.T, n, prefetch int) (url, q string, sub *idemamqp.Subscriber) {
	t.Helper()
	url = amqpURL(t)
	subject := "idemtest." + unique()
	q = subject + ".pause"
	if err := idemamqp.DeclareQueue(url, idemamqp.QueueConfig{Name: q, Exchange: "amq.topic", RoutingKey: subject}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idemamqp.DeleteQueue(url, q) })
	pub, err := idemamqp.NewPublisher(idemamqp.PublisherConfig{URL: url, Exchange: "amq.topic"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range n {
		if err := pub.Publish(context.Background(), idem.Message{ID: fmt.Sprint("m-", i), Subject: subject, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err = idemamqp.NewSubscriber(idemamqp.SubscriberConfig{URL: url, Queue: q, Prefetch: prefetch, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return url, q, sub
}

// While paused, RabbitMQ pushes nothing beyond the deliveries already
// received (at most the prefetch), however many of them are settled; they
// can still be fetched and acked; after Resume the rest flows.
func TestPauseStopsTheBrokerPushing(t *testing.T) {
	ctx := context.Background()
	const n, prefetch = 50, 10
	url, q, sub := queueOf(t, n, prefetch)
	if err := sub.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	// Settle everything the broker pushes while paused.
	acked := 0
	for {
		ds, err := sub.Fetch(ctx, n, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
			acked++
		}
	}
	if acked > prefetch {
		t.Errorf("paused: %d messages pushed and acked, want at most the prefetch %d", acked, prefetch)
	}
	if ready := readyCount(t, url, q); ready != n-acked {
		t.Errorf("paused: %d ready in the queue after %d acked, want the other %d waiting in the queue", ready, acked, n-acked)
	}
	if !sub.Paused() {
		t.Error("Paused() is false after Pause")
	}
	if err := sub.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for acked < n {
		if time.Now().After(deadline) {
			t.Fatalf("resumed: %d of %d acked", acked, n)
		}
		ds, err := sub.Fetch(ctx, n, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
			acked++
		}
	}
	if sub.Paused() {
		t.Error("Paused() is true after Resume")
	}
}

// Deliveries pushed before a pause and not yet fetched are not stranded:
// after Resume they come first, then the rest of the queue.
func TestPauseKeepsThePushedDeliveries(t *testing.T) {
	ctx := context.Background()
	const n, prefetch = 30, 10
	url, q, sub := queueOf(t, n, prefetch)
	seen := map[string]bool{}
	fetch := func(max int) int {
		ds, err := sub.Fetch(ctx, max, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			seen[d.Message().ID] = true
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return len(ds)
	}
	fetch(1)
	if err := sub.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		fetch(n)
	}
	if len(seen) != n {
		t.Errorf("after a pause and resume %d of %d messages delivered", len(seen), n)
	}
	if ready := readyCount(t, url, q); ready != 0 {
		t.Errorf("%d messages still ready", ready)
	}
}
