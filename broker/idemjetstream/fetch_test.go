package idemjetstream_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/idemjetstream"
)

// Short fetches lose nothing: a message the server delivers to a pull just
// before the pull's expiry reaches this Fetch, not a pull the client has
// already given up on (which left it unacknowledged until AckWait, here a
// minute, redelivered it). Messages are published while a loop fetches
// with a wait of a few milliseconds, so many pulls expire while messages
// are on their way; every message must arrive on its first delivery.
func TestShortFetchesLoseNothing(t *testing.T) {
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	stream, subject := newStream(t, j)
	sub, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: stream, Durable: "short", AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < n; i += 10 {
			msgs := make([]idem.Message, 10)
			for k := range msgs {
				id := strconv.Itoa(i + k)
				msgs[k] = idem.Message{ID: id, Subject: subject, Payload: []byte(id)}
			}
			if err := pub.Publish(t.Context(), msgs...); err != nil {
				errc <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		errc <- nil
	}()
	seen := map[string]bool{}
	// A progress bound well under AckWait: a message lost to an expired
	// pull comes back only after a minute.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for len(seen) < n {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			errc <- nil
		default:
		}
		ds, err := sub.Fetch(ctx, 100, 2*time.Millisecond)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(seen), n, err)
		}
		for _, d := range ds {
			m := d.Message()
			if m.Attempt != 1 || seen[m.ID] {
				t.Fatalf("message %s delivered again (attempt %d)", m.ID, m.Attempt)
			}
			seen[m.ID] = true
		}
		if len(ds) > 0 {
			if err := sub.AckBatch(ctx, ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A cancelled Fetch gives its pull up at once: messages published after
// it reach the next Fetch on their first delivery, not after AckWait (a
// minute here), although the server still holds the cancelled pull.
func TestCancelledFetchLeavesNothingBehind(t *testing.T) {
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	stream, subject := newStream(t, j)
	sub, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: stream, Durable: "cancel", AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := sub.Fetch(ctx, 10, 30*time.Second)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // the pull is with the server
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Fetch: %v, want context.Canceled", err)
	}
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		id := strconv.Itoa(i)
		if err := pub.Publish(t.Context(), idem.Message{ID: id, Subject: subject, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	wctx, wcancel := context.WithTimeout(t.Context(), 20*time.Second) // well under AckWait
	defer wcancel()
	for len(seen) < 5 {
		ds, err := sub.Fetch(wctx, 10, time.Second)
		if err != nil {
			t.Fatalf("after %d of 5 messages: %v", len(seen), err)
		}
		for _, d := range ds {
			m := d.Message()
			if m.Attempt != 1 || seen[m.ID] {
				t.Fatalf("message %s delivered again (attempt %d)", m.ID, m.Attempt)
			}
			seen[m.ID] = true
		}
	}
}
