package idemwatermill_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/idemkit/idem/internal/operator"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/idemwatermill"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
)

// TestMiddlewareIdentity checks which id and which consumer the middleware
// dedups on: a configured metadata key instead of the UUID, a redrive
// addressed to another consumer acknowledged unprocessed, and the errors
// for a message without the key and a middleware with no consumer name.
func TestMiddlewareIdentity(t *testing.T) {
	ctx := context.Background()
	d := testdb.SQLite(t)
	ib, err := inbox.New(d, inbox.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	once, err := idemwatermill.Middleware(ib, idemwatermill.Config[*sql.Tx]{Consumer: "billing", IDMetadata: "order-id", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var r runs
	h := once(func(msg *message.Message) ([]*message.Message, error) {
		if _, ok := idemwatermill.TxFromContext[*sql.Tx](msg.Context()); !ok {
			return nil, errors.New("no transaction in the message's context")
		}
		r.inc("billing", msg.Metadata.Get("order-id"))
		return nil, nil
	})
	deliver := func(uuid, orderID string, md map[string]string) error {
		m := message.NewMessage(uuid, []byte(`{"order":"`+orderID+`"}`))
		if orderID != "" {
			m.Metadata.Set("order-id", orderID)
		}
		for k, v := range md {
			m.Metadata.Set(k, v)
		}
		_, err := h(m)
		return err
	}
	// Two envelopes, one producer id: the second is a duplicate.
	for _, uuid := range []string{"u-1", "u-2"} {
		if err := deliver(uuid, "o-1", nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.get("billing", "o-1"); n != 1 {
		t.Errorf("o-1 ran %d times, want 1", n)
	}
	if rec, found, err := operator.InboxRecordOf(ctx, d, "billing", "o-1"); err != nil || !found || rec.State != "completed" {
		t.Errorf("inbox record o-1: %+v %v %v", rec, found, err)
	}
	// A redrive for another consumer: acknowledged, not run, not recorded.
	if err := deliver("u-3", "o-2", map[string]string{broker.HeaderRedriveFor: "shipping"}); err != nil {
		t.Fatal(err)
	}
	if n := r.get("billing", "o-2"); n != 0 {
		t.Errorf("a redrive for another consumer ran the handler %d times", n)
	}
	if _, found, _ := operator.InboxRecordOf(ctx, d, "billing", "o-2"); found {
		t.Error("a redrive for another consumer left an inbox record")
	}
	// The key missing: a permanent error (dead-lettered with DeadLetters).
	if err := deliver("u-4", "", nil); !idem.IsPermanent(err) {
		t.Errorf("message without the id key: %v, want a permanent error", err)
	}

	unnamed, err := idemwatermill.Middleware(ib, idemwatermill.Config[*sql.Tx]{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = unnamed(func(*message.Message) ([]*message.Message, error) { return nil, nil })(message.NewMessage("u-5", nil))
	if !errors.Is(err, idemwatermill.ErrNoConsumer) {
		t.Errorf("outside a router without Config.Consumer: %v, want ErrNoConsumer", err)
	}
	if _, err := idemwatermill.Middleware[*sql.Tx](nil, idemwatermill.Config[*sql.Tx]{}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil inbox: %v, want idem.ErrInvalidOption", err)
	}
}
