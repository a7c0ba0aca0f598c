package boxoffice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/internal/fakeprovider"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

func TestDecodeOrderRequest(t *testing.T) {
	ok := `{"event_id":"e-1","customer_email":"a@example.com","seats":10,"total_cents":1,"currency":"eur"}`
	req, err := boxoffice.DecodeOrderRequest([]byte(ok))
	if err != nil || req.Currency != "EUR" || req.Seats != 10 {
		t.Fatalf("%+v %v", req, err)
	}
	for _, bad := range []string{
		`{}`, `[]`, `{"event_id":"e","customer_email":"a@example.com","seats":11,"total_cents":1,"currency":"EUR"}`,
		`{"event_id":"e","customer_email":"a@example.com","seats":1.5,"total_cents":1,"currency":"EUR"}`,
		`{"event_id":"e","customer_email":"Ana <a@example.com>","seats":1,"total_cents":1,"currency":"EUR"}`,
		`{"event_id":"","customer_email":"a@example.com","seats":1,"total_cents":1,"currency":"EUR"}`,
		`{"event_id":"e","customer_email":"a@example.com","seats":1,"total_cents":-5,"currency":"EUR"}`,
		`{"event_id":"e","customer_email":"a@example.com","seats":1,"total_cents":1,"currency":"E1R"}`,
		`{"event_id":"e","customer_email":"a@example.com","seats":1,"total_cents":1,"currency":"EUR","extra":1}`,
	} {
		var ve *boxoffice.ValidationError
		if _, err := boxoffice.DecodeOrderRequest([]byte(bad)); !errors.As(err, &ve) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	for v, want := range map[string]bool{"acme": true, "a_b-9": true, "": false, "a b": false, "é": false} {
		if _, err := boxoffice.ParseTenant(v, true); (err == nil) != want {
			t.Errorf("tenant %q: %v", v, err)
		}
	}
	if tn, _ := boxoffice.ParseTenant("", false); tn != boxoffice.DefaultTenant {
		t.Errorf("absent tenant = %q", tn)
	}
}

func TestDecodeOrderConfirmedPoison(t *testing.T) {
	for _, m := range []idem.Message{
		{ID: "1", Payload: []byte(`{}`), Headers: map[string]string{"ce-type": "OrderConfirmed"}},
		{ID: "2", Payload: []byte(`not json`), Headers: map[string]string{"ce-type": "OrderConfirmed"}},
		{ID: "3", Payload: []byte(`{"order_id":"ord_1"}`), Headers: map[string]string{"ce-type": "Other"}},
	} {
		if _, err := boxoffice.DecodeOrderConfirmed(m); !idem.IsPermanent(err) {
			t.Errorf("%s: %v is not permanent", m.ID, err)
		}
	}
}

// TestBrokerDuplicates runs the consumers on the in-memory broker told to
// store every event twice: the inbox absorbs the copies.
func TestBrokerDuplicates(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testBrokerDuplicates(t, e.D) })
}

func testBrokerDuplicates(t *testing.T, d store.Driver[any]) {
	ctx := context.Background()
	mb, err := memory.New(memory.Config{AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	p := fakeprovider.New(fakeprovider.Config{})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sys, err := boxoffice.New(ctx, d, boxoffice.Config{Broker: boxoffice.MemoryBroker{B: mb}, ProviderURL: p.URL(),
		Roles:        []boxoffice.Role{boxoffice.RoleRelay, boxoffice.RoleNotification, boxoffice.RoleBilling, boxoffice.RoleSearch, boxoffice.RoleEffects},
		PollInterval: 10 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	mb.DuplicateNext(n)
	// Orders written straight through the outbox path the API uses.
	for i := range n {
		if err := store.InTx(ctx, d, func(tx any) error {
			_, err := sys.CreateOrderTx(ctx, tx, "public", boxoffice.OrderRequest{EventID: "e", CustomerEmail: "a@example.com", Seats: 1, TotalCents: int64(100 + i), Currency: "EUR"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sys.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := sys.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Invoices == n && st.EmailsSent == n && st.DuplicatesSuppressed["billing"] == n && st.SeatsLeft["e"] == 1_000_000-n {
			if st.Orders != n || st.EmailsScheduled != n || p.UniqueEffects() != n || st.DeadLetters != 0 {
				t.Fatalf("stats %+v", st)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDecodeOrderConfirmedHostileFields: an event whose fields the order
// API would never have accepted (a forged publish) is a permanent error,
// dead-lettered, not applied or retried.
func TestDecodeOrderConfirmedHostileFields(t *testing.T) {
	valid := map[string]any{
		"order_id": "ord_01890000-0000-7000-8000-000000000000", "tenant": "acme", "event_id": "concert-1",
		"customer_email": "ana@example.com", "seats": 2, "total_cents": 9000, "currency": "EUR", "status": "confirmed",
		"created_at": "2026-01-01T00:00:00Z", "seats_left": 5, "event_version": 3,
	}
	msg := func(payload []byte) idem.Message {
		return idem.Message{ID: "m", Payload: payload, Headers: map[string]string{outbox.HeaderID: "ev-1", outbox.HeaderSource: "test", outbox.HeaderType: boxoffice.EventTypeOrderConfirmed}}
	}
	body, _ := json.Marshal(valid)
	if _, err := boxoffice.DecodeOrderConfirmed(msg(body)); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	for field, bad := range map[string]any{
		"order_id": "ord_1", "tenant": "a\x00b", "event_id": "c\x00", "customer_email": "x@example.com, y@example.com",
		"currency": "E\x00R",
	} {
		m := maps.Clone(valid)
		m[field] = bad
		body, _ := json.Marshal(m)
		if _, err := boxoffice.DecodeOrderConfirmed(msg(body)); !idem.IsPermanent(err) || !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%s = %q: %v", field, bad, err)
		}
	}
	raw := bytes.Replace(body, []byte("acme"), []byte("ac\xffe"), 1)
	if _, err := boxoffice.DecodeOrderConfirmed(msg(raw)); !idem.IsPermanent(err) {
		t.Errorf("invalid UTF-8: %v", err)
	}
}
