package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
)

// Run records the consumer's inbox retention in the database before it
// serves, and a restart with another retention replaces the record, so
// that a redrive in another process is judged by the retention in force.
func TestRunRecordsInboxRetention(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRunRecordsInboxRetention(t, e.D) })
}

func testRunRecordsInboxRetention[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, found, err := operator.RecordedRetention(ctx, d, "billing"); err != nil || found {
		t.Fatalf("before any start: found %v, %v", found, err)
	}
	for _, retain := range []time.Duration{72 * time.Hour, 36 * time.Hour} {
		sub, err := b.Subscribe("orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		ib, err := inbox.New(d, inbox.Config{RetentionFor: map[string]time.Duration{"billing": retain}})
		if err != nil {
			t.Fatal(err)
		}
		// The record is written before Run serves: it is there when a
		// handled message is.
		handled := make(chan struct{})
		c, err := consumer.New(ib, sub, consumer.Config[TTx]{Name: "billing", FetchWait: 10 * time.Millisecond,
			Handler: func(context.Context, TTx, idem.Message) error { close(handled); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		if err := b.Publisher().Publish(ctx, idem.Message{ID: "m-" + retain.String(), Subject: "orders", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			t.Fatal("the consumer handled nothing")
		}
		r, found, err := operator.RecordedRetention(ctx, d, "billing")
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		sub.Close()
		if err != nil || !found || r.Retention != retain || r.RecordedAt.IsZero() {
			t.Fatalf("after a start with %s: %+v found %v, %v", retain, r, found, err)
		}
	}
}

// billingThatMustNotStart returns a memory broker and a consumer
// "billing" of its subject "orders" on d, whose handler fails the test if
// it runs.
func billingThatMustNotStart(t *testing.T, d store.Driver[any]) (*memory.Broker, *consumer.Consumer[any]) {
	t.Helper()
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(ib, sub, consumer.Config[any]{Name: "billing",
		Handler: func(context.Context, any, idem.Message) error { t.Error("a message was handled"); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

// A consumer that cannot record its retention (migration 0015 not
// applied) does not start, and says what to run.
func TestRunWithoutHorizonsTableDoesNotStart(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		testdb.Exec(t, e.D, `DROP TABLE `+e.D.Table("consumer_horizons"))
		b, c := billingThatMustNotStart(t, e.D)
		if err := b.Publisher().Publish(context.Background(), idem.Message{ID: "m", Subject: "orders", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Run(ctx); err == nil || !strings.Contains(err.Error(), "idem migrate up") {
			t.Fatalf("Run without consumer_horizons: %v, want a refusal naming 'idem migrate up'", err)
		}
	})
}

// A consumer on a database whose consumer_horizons lacks migration 0017's
// columns does not start either, and names the migration to run.
func TestRunWithoutMigration0017DoesNotStart(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		if _, err := migrate.New(e.D).UpTo(context.Background(), 16); err != nil {
			t.Fatal(err)
		}
		_, c := billingThatMustNotStart(t, e.D)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Run(ctx); !errors.Is(err, migrate.ErrNotMigrated) || !strings.Contains(err.Error(), "0017_retention_widening") {
			t.Fatalf("Run at migration 16: %v, want a refusal naming 0017_retention_widening", err)
		}
	}, testdb.Unmigrated)
}

// On SQLite a long write transaction of another process holds the lock the
// record needs. The consumer does not refuse to start (the transaction may
// be waiting for what this consumer serves): it serves, and records its
// retention once the lock is free.
func TestRunRecordsRetentionLaterWhenTheLockIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.SQLite(t)
	holder, err := d.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(d, inbox.Config{RetentionFor: map[string]time.Duration{"billing": 36 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	handled := make(chan struct{}, 1)
	c, err := consumer.New(ib, sub, consumer.Config[*sql.Tx]{Name: "billing", FetchWait: 10 * time.Millisecond,
		Handler: func(context.Context, *sql.Tx, idem.Message) error { handled <- struct{}{}; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	// Longer than the first record's attempt and the store's lock timeout.
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while another transaction held the lock; want it serving", err)
	case <-time.After(7 * time.Second):
	}
	if _, err := holder.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if err := b.Publisher().Publish(ctx, idem.Message{ID: "m-1", Subject: "orders", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer handled nothing after the lock was released")
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		r, found, err := operator.RecordedRetention(ctx, d, "billing")
		if err == nil && found && r.Retention == 36*time.Hour {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retention was never recorded: %+v found %v, %v", r, found, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
