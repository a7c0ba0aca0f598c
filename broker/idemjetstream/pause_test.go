package idemjetstream_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemjetstream"
)

func TestPauseStopsPulling(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		srv := startEmbedded(t)
		_, j := dial(t, srv.ClientURL())
		testPauseStopsPulling(t, j)
	})
	t.Run("nats-server", func(t *testing.T) {
		url := os.Getenv("IDEM_TEST_NATS_URL")
		if url == "" {
			t.Skip("IDEM_TEST_NATS_URL not set; export IDEM_TEST_NATS_URL=nats://127.0.0.1:4222 to run against a real nats-server")
		}
		_, j := dial(t, url)
		testPauseStopsPulling(t, j)
	})
}

// Paused, the subscriber pulls nothing: the server's consumer keeps every
// message pending and none in flight; resumed, they are fetched.
func testPauseStopsPulling(t *testing.T, j js.JetStream) {
	ctx := context.Background()
	stream, subject := newStream(t, j)
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := pub.Publish(ctx, idem.Message{ID: fmt.Sprint("m-", i), Subject: subject, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := idemjetstream.NewSubscriber(ctx, j, idemjetstream.SubscriberConfig{Stream: stream, Durable: "paused", AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if ds, err := sub.Fetch(ctx, n, 200*time.Millisecond); err != nil || len(ds) != 0 {
		t.Fatalf("paused Fetch: %d deliveries, %v; want none", len(ds), err)
	}
	cons, err := j.Consumer(ctx, stream, "paused")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != n || info.NumAckPending != 0 || info.NumWaiting != 0 {
		t.Errorf("paused: pending %d, ack pending %d, waiting pulls %d; want %d pending, nothing pulled", info.NumPending, info.NumAckPending, info.NumWaiting, n)
	}
	if !sub.Paused() {
		t.Error("Paused() false after Pause")
	}
	if err := sub.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for got < n && time.Now().Before(deadline) {
		ds, err := sub.Fetch(ctx, n, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got += len(ds)
	}
	if got != n {
		t.Errorf("resumed: %d of %d fetched", got, n)
	}
}
