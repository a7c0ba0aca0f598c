package idemjetstream_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemjetstream"
)

// patient returns n subscribers of one durable consumer whose deliveries
// come back only after a minute (AckWait), a publisher and the subject, on
// an embedded server.
func patient(t *testing.T, durable string, n int) ([]*idemjetstream.Subscriber, *idemjetstream.Publisher, string) {
	t.Helper()
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	stream, subject := newStream(t, j)
	subs := make([]*idemjetstream.Subscriber, n)
	for i := range subs {
		sub, err := idemjetstream.NewSubscriber(t.Context(), j, idemjetstream.SubscriberConfig{Stream: stream, Durable: durable, AckWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		subs[i] = sub
	}
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return subs, pub, subject
}

// single returns a subscriber made with cfg on a new stream of an
// embedded server, its durable consumer, a publisher and the subject.
func single(t *testing.T, cfg idemjetstream.SubscriberConfig) (*idemjetstream.Subscriber, *idemjetstream.Publisher, js.Consumer, string) {
	t.Helper()
	srv := startEmbedded(t)
	_, j := dial(t, srv.ClientURL())
	stream, subject := newStream(t, j)
	cfg.Stream = stream
	sub, err := idemjetstream.NewSubscriber(t.Context(), j, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	pub, err := idemjetstream.NewPublisher(j, idemjetstream.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := j.Consumer(t.Context(), stream, cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	return sub, pub, cons, subject
}

// firstDeliveries fetches (with maxWait) and acks until n distinct
// messages arrived, each on its first delivery, within 30s: well under
// the minute after which a message lost to a pull would come back. It
// fails at once on a redelivery or on an error from errc (nil: none).
func firstDeliveries(t *testing.T, sub *idemjetstream.Subscriber, n int, maxWait time.Duration, errc chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			errc <- nil
		default:
		}
		ds, err := sub.Fetch(ctx, 100, maxWait)
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
}

// Short fetches lose nothing: a message the server delivers to a pull just
// before the pull's expiry reaches this Fetch, not a pull the client has
// already given up on (which left it unacknowledged until AckWait
// redelivered it). Messages are published while a loop fetches with a wait
// of a few milliseconds, so many pulls expire while messages are on their
// way; every message must arrive on its first delivery.
func TestShortFetchesLoseNothing(t *testing.T) {
	subs, pub, subject := patient(t, "short", 1)
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
	firstDeliveries(t, subs[0], n, 2*time.Millisecond, errc)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A cancelled Fetch gives its pull up at once, as a consumer shutting
// down does: messages published after it reach another instance of the
// consumer on their first delivery, not after AckWait, although the
// server still holds the cancelled pull.
func TestCancelledFetchLeavesNothingBehind(t *testing.T) {
	subs, pub, subject := patient(t, "cancel", 2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := subs[0].Fetch(ctx, 10, 30*time.Second)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // the pull is with the server
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Fetch: %v, want context.Canceled", err)
	}
	// nats.go sends the pull's unsubscription just after Fetch returns;
	// let it reach the server before the messages do.
	time.Sleep(100 * time.Millisecond)
	for i := range 5 {
		id := strconv.Itoa(i)
		if err := pub.Publish(t.Context(), idem.Message{ID: id, Subject: subject, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	firstDeliveries(t, subs[1], 5, time.Second, nil)
}

// A batch fetch held back by the consumer's MaxAckPending returns what
// the limit let through at once, and loses nothing: the pull ends by the
// server's expiry. (A first form of the fix gathered with no_wait pulls;
// the server keeps one open when the limit holds part of its batch back,
// and nats.go read nothing more for a second, past the Fetch's wait and
// deaf to its context, before it gave the pull up: this test failed it.)
// Once acks free room, the rest arrives on first delivery.
func TestFetchAtMaxAckPending(t *testing.T) {
	sub, pub, _, subject := single(t, idemjetstream.SubscriberConfig{Durable: "held", AckWait: time.Minute, MaxAckPending: 5})
	const n = 20
	msgs := make([]idem.Message, n)
	for i := range msgs {
		id := strconv.Itoa(i)
		msgs[i] = idem.Message{ID: id, Subject: subject, Payload: []byte(id)}
	}
	if err := pub.Publish(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
	// Full batches of 3, then the limit of 5 lets 2 of the next through.
	const maxWait = 100 * time.Millisecond
	var held []broker.Delivery
	for len(held) < 5 {
		start := time.Now()
		ds, err := sub.Fetch(t.Context(), 3, maxWait)
		if err != nil {
			t.Fatal(err)
		}
		// Milliseconds here; the no_wait pull took a second.
		if took := time.Since(start); len(ds) > 0 && took > 750*time.Millisecond {
			t.Fatalf("Fetch of %d deliveries (after %d) took %v, with a wait of %v", len(ds), len(held), took.Round(time.Millisecond), maxWait)
		}
		held = append(held, ds...)
	}
	if len(held) != 5 {
		t.Fatalf("%d deliveries outstanding, want MaxAckPending's 5", len(held))
	}
	if ds, err := sub.Fetch(t.Context(), 3, maxWait); err != nil || len(ds) != 0 {
		t.Fatalf("Fetch at MaxAckPending: %d deliveries, %v; want none", len(ds), err)
	}
	if err := sub.AckBatch(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	firstDeliveries(t, sub, n-5, maxWait, nil)
}

// Pause between a Fetch's pulls: the first message, delivered to the pull
// that waited for it, is returned, and no pull gathers more (Pause
// promises no pull request until Resume); the rest stay in the stream,
// undelivered.
func TestPauseBetweenPulls(t *testing.T) {
	sub, pub, cons, subject := single(t, idemjetstream.SubscriberConfig{Durable: "between", AckWait: time.Minute})
	// An empty stream: this Fetch comes back empty, so the next one waits
	// for a first message before it gathers.
	if ds, err := sub.Fetch(t.Context(), 10, 20*time.Millisecond); err != nil || len(ds) != 0 {
		t.Fatalf("Fetch of an empty stream: %d deliveries, %v", len(ds), err)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		ds, err := sub.Fetch(t.Context(), 10, 20*time.Second)
		done <- result{len(ds), err}
	}()
	time.Sleep(100 * time.Millisecond) // the pull for the first message is with the server
	if err := sub.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	msgs := make([]idem.Message, 3)
	for i := range msgs {
		id := strconv.Itoa(i)
		msgs[i] = idem.Message{ID: id, Subject: subject, Payload: []byte(id)}
	}
	if err := pub.Publish(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != 1 {
		t.Fatalf("Fetch paused between its pulls: %d deliveries, %v; want the first message alone", r.n, r.err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 2 || info.NumAckPending != 1 {
		t.Fatalf("after the paused Fetch: %d messages undelivered and %d unacknowledged, want 2 and 1", info.NumPending, info.NumAckPending)
	}
}
