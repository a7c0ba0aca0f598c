package idemwatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/idemkit/idem/internal/operator"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemwatermill"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

func newPublisher(t *testing.T, cfg idemwatermill.PublisherConfig) (store.Driver[*sql.Tx], *idemwatermill.Publisher[*sql.Tx]) {
	t.Helper()
	d := testdb.SQLite(t)
	ob, err := outbox.New(d, outbox.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := idemwatermill.NewPublisher(d, ob, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, p
}

func pending(t *testing.T, d store.Driver[*sql.Tx]) int64 {
	t.Helper()
	c, err := operator.OutboxCounts(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return c["pending"]
}

// TestPublisherTransaction checks where Publish writes: in the transaction
// of the messages' context (rolled back with it), through PublisherTx,
// never outside a transaction unless OwnTx says so, and never with two
// transactions in one call.
func TestPublisherTransaction(t *testing.T) {
	ctx := context.Background()
	d, p := newPublisher(t, idemwatermill.PublisherConfig{})

	if err := p.Publish("orders", message.NewMessage("m-0", nil)); !errors.Is(err, idemwatermill.ErrNoTx) {
		t.Fatalf("Publish without a transaction: %v, want ErrNoTx", err)
	}

	// Rolled back with the caller's transaction: never written.
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := message.NewMessage("m-1", []byte("x"))
	m.SetContext(idemwatermill.ContextWithTx(ctx, tx))
	if err := p.Publish("orders", m); err != nil {
		t.Fatal(err)
	}
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if n := pending(t, d); n != 0 {
		t.Fatalf("%d events after a rollback, want 0", n)
	}

	// Committed with it, through the context and through PublisherTx.
	err = store.InTx(ctx, d, func(tx *sql.Tx) error {
		m := message.NewMessage("m-2", []byte("x"))
		m.SetContext(idemwatermill.ContextWithTx(ctx, tx))
		if err := p.Publish("orders", m); err != nil {
			return err
		}
		return p.PublisherTx(ctx, tx).Publish("orders", message.NewMessage("m-3", []byte("x")))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := pending(t, d); n != 2 {
		t.Fatalf("%d events after the commit, want 2", n)
	}
}

// TestPublisherMixedTx refuses a Publish whose messages carry different
// transactions, or a transaction for some and none for others.
func TestPublisherMixedTx(t *testing.T) {
	ctx := context.Background()
	d, p := newPublisher(t, idemwatermill.PublisherConfig{OwnTx: true})
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Rollback(ctx, tx) }()
	a := message.NewMessage("a", nil)
	a.SetContext(idemwatermill.ContextWithTx(ctx, tx))
	b := message.NewMessage("b", nil)
	if err := p.Publish("orders", a, b); !errors.Is(err, idemwatermill.ErrMixedTx) {
		t.Fatalf("one message with a transaction, one without: %v, want ErrMixedTx", err)
	}
	b.SetContext(idemwatermill.ContextWithTx(ctx, tx)) // the same tx, another context value
	if err := p.Publish("orders", a, b); !errors.Is(err, idemwatermill.ErrMixedTx) {
		t.Fatalf("two context values: %v, want ErrMixedTx", err)
	}
	b.SetContext(a.Context())
	if err := p.Publish("orders", a, b); err != nil {
		t.Fatalf("one context for both: %v", err)
	}
}

// TestPublisherOwnTxIdentity publishes in the publisher's own transaction:
// a retried Publish of a UUID is written once, the UUID with another
// payload or topic is refused loudly, and Close stops publishing.
func TestPublisherOwnTxIdentity(t *testing.T) {
	ctx := context.Background()
	d, p := newPublisher(t, idemwatermill.PublisherConfig{OwnTx: true})
	m := message.NewMessage("evt-1", []byte(`{"n":1}`))
	m.Metadata.Set(idemwatermill.MetadataKey, "order-1")
	m.Metadata.Set(outbox.HeaderType, "order.created")
	for range 2 {
		if err := p.Publish("orders", m); err != nil {
			t.Fatal(err)
		}
	}
	if n := pending(t, d); n != 1 {
		t.Fatalf("%d events after publishing one UUID twice, want 1", n)
	}
	if err := p.Publish("orders", message.NewMessage("evt-1", []byte(`{"n":2}`))); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("same UUID, other payload: %v, want idem.ErrFingerprintMismatch", err)
	}
	if err := p.Publish("invoices", m); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("same UUID, other topic: %v, want idem.ErrFingerprintMismatch", err)
	}
	var key, typ string
	if err := d.Pool().QueryRow(ctx, `SELECT ordering_key, type FROM `+d.Table("outbox")+` WHERE event_id = $1`, "evt-1").Scan(&key, &typ); err != nil {
		t.Fatal(err)
	}
	if key != "order-1" || typ != "order.created" {
		t.Errorf("stored key %q type %q, want order-1 order.created", key, typ)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("orders", message.NewMessage("evt-2", nil)); !errors.Is(err, idemwatermill.ErrPublisherClosed) {
		t.Fatalf("Publish after Close: %v, want ErrPublisherClosed", err)
	}
}
