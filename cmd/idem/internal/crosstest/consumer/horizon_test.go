package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/idemjetstream"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/horizon"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testclock"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/retention"
)

// A consumer whose inbox retention is shorter than its JetStream stream's
// max age (read from the stream config) does not start; it starts when told
// to accept it, or with a long enough retention.
func TestShortRetentionDoesNotStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.SQLite(t)
	bizTable(t, d)
	env := startNATS(t)
	stream := env.stream + "_AGED"
	subject := env.subject + ".aged"
	if _, err := idemjetstream.EnsureStream(ctx, env.js, js.StreamConfig{Name: stream, Subjects: []string{subject},
		MaxAge: 7 * 24 * time.Hour, Storage: js.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if err := env.pub.Publish(ctx, idem.Message{ID: "m-1", Subject: subject, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	newConsumer := func(retain time.Duration, accept bool) *consumer.Consumer[*sqlTx] {
		sub, err := idemjetstream.NewSubscriber(ctx, env.js, idemjetstream.SubscriberConfig{Stream: stream, Durable: "billing"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		ib, err := inbox.New(d, inbox.Config{Retention: time.Hour, RetentionFor: map[string]time.Duration{"billing": retain}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := consumer.New(ib, sub, consumer.Config[*sqlTx]{Name: "billing", FetchWait: 50 * time.Millisecond,
			AcceptShortRetention: accept,
			Handler: func(ctx context.Context, tx *sqlTx, msg idem.Message) error {
				return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
			}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := newConsumer(24*time.Hour, false)
	err := c.Run(ctx) // returns at once: it never starts
	var re *consumer.RetentionError
	if !errors.Is(err, consumer.ErrRetentionTooShort) || !errors.Is(err, retention.ErrRetentionTooShort) || !errors.As(err, &re) {
		t.Fatalf("Run = %v, want a RetentionError", err)
	}
	if re.Retention != 24*time.Hour || re.StreamMaxAge != 7*24*time.Hour || re.Stream != stream || re.Source != "jetstream stream config" {
		t.Fatalf("RetentionError %+v", re)
	}
	if n := effects(t, d, ""); n != 0 {
		t.Fatalf("a consumer that did not start processed %d messages", n)
	}
	hc, st, _ := c.Horizon(ctx)
	if hc.InboxRetention != 24*time.Hour || st.MaxAge != 7*24*time.Hour || st.DuplicateWindow != idemjetstream.DefaultDuplicateWindow {
		t.Fatalf("Horizon = %+v, %+v", hc, st)
	}

	// Told to accept it: starts and processes.
	stop := start(t, newConsumer(24*time.Hour, true))
	waitFor(t, "processed with AcceptShortRetention", func() bool { return effects(t, d, "m-1") == 1 })
	stop()

	// Long enough: starts without being told.
	if _, _, err := newConsumer(8*24*time.Hour, false).Horizon(ctx); err != nil {
		t.Fatalf("8d retention against a 7d stream: %v", err)
	}
}

// Why: with a fake clock, a message processed, forgotten by the GC after the
// inbox retention and delivered again inside the stream's max age is
// processed a second time. The declared StreamMaxAge makes Run refuse that
// configuration; accepting it reproduces the double effect.
func TestShortRetentionDoubleEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.SQLite(t)
	bizTable(t, d)
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(d, inbox.Config{Retention: 24 * time.Hour, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg := consumer.Config[*sqlTx]{Name: "billing", FetchWait: 20 * time.Millisecond, StreamMaxAge: 7 * 24 * time.Hour,
		Handler: func(ctx context.Context, tx *sqlTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		}}
	c, err := consumer.New(ib, broker.Subscriber(sub), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); !errors.Is(err, consumer.ErrRetentionTooShort) {
		t.Fatalf("Run with a declared 7d max age and 24h retention = %v", err)
	}
	cfg.AcceptShortRetention = true
	c, err = consumer.New(ib, sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	msg := idem.Message{ID: "order-1", Subject: "orders", Payload: []byte(`{"amount":100}`)}
	if err := b.Publisher().Publish(ctx, msg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first delivery processed", func() bool { return effects(t, d, "order-1") == 1 })
	clock.Advance(2 * 24 * time.Hour) // inside the stream's 7 days, past the inbox's 24 h
	gc, err := retention.New(d, retention.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := gc.RunOnce(ctx); err != nil || rep.Deleted["inbox"] != 1 {
		t.Fatalf("gc: %+v, %v", rep, err)
	}
	if err := b.Publisher().Publish(ctx, msg); err != nil { // the broker delivers it again
		t.Fatal(err)
	}
	waitFor(t, "second delivery processed as new", func() bool { return effects(t, d, "order-1") == 2 })
	stop()
}

// Unlimited declared explicitly is longer than any retention.
func TestDeclaredUnlimitedMaxAge(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	b := memBroker(t)
	sub, _ := b.Subscribe("orders", "billing")
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[*sqlTx]{Name: "billing", StreamMaxAge: horizon.Unlimited,
		Handler: func(context.Context, *sqlTx, idem.Message) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Horizon(context.Background()); !errors.Is(err, consumer.ErrRetentionTooShort) {
		t.Fatalf("Horizon = %v", err)
	}
}
