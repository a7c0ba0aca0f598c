package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func memBroker(t *testing.T) *memory.Broker {
	b, err := memory.New(memory.Config{AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestPoisonPaths(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 4} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			t.Parallel()
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testPoisonPaths(t, d.D, batch) })
		})
	}
}

// Changed payload, schema violations, non-JSON payloads and exhausted
// retries all end as dead letters (with metrics) while good messages flow.
func testPoisonPaths[TTx any](t *testing.T, d store.Driver[TTx], batch int) {
	ctx := context.Background()
	bizTable(t, d)
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	reg, m := newMetrics(t)
	letters, _ := dlq.New(d, dlq.Config{})
	// The validator a service would plug (a JSON Schema library, say):
	// a JSON object whose order_id is a string.
	validate := func(payload []byte) error {
		var v struct {
			OrderID *string `json:"order_id"`
		}
		if err := json.Unmarshal(payload, &v); err != nil {
			return err
		}
		if v.OrderID == nil {
			return errors.New("order_id: a string is required")
		}
		return nil
	}
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", BatchSize: batch, FetchWait: 50 * time.Millisecond, Observer: m, DLQ: letters, Validate: validate,
		MaxAttempts: 3, Backoff: consumer.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			if msg.ID == "always-fails" {
				return errors.New("downstream timeout")
			}
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	pub := b.Publisher()
	publish := func(id, payload string) {
		t.Helper()
		if err := pub.Publish(ctx, idem.Message{ID: id, Subject: "orders", Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("m-1", `{"order_id":"1"}`)
	waitFor(t, "m-1 processed", func() bool { return effects(t, d, "m-1") == 1 })
	publish("m-1", `{"order_id":"1-changed"}`) // same id, other payload
	publish("m-2", `{"order_id":2}`)           // schema violation
	publish("m-3", `not json`)                 // undecodable
	publish("always-fails", `{"order_id":"x"}`)
	for i := range 5 {
		publish(fmt.Sprintf("ok-%d", i), `{"order_id":"ok"}`)
	}
	// A letter is parked before the consumer counts it and terminates its
	// delivery: wait for the terminations too, so the counts read below
	// are final.
	waitFor(t, "4 dead letters, 4 terminated deliveries and 6 processed", func() bool {
		n, _ := letters.CountParked(ctx)
		return n["billing"] == 4 && b.Stats().Termed == 4 && value(t, reg, "idem_messages_processed_total", "consumer=billing") == 6
	})
	if n := effects(t, d, ""); n != 6 {
		t.Fatalf("effects = %d, want 6 (m-1 once + 5 ok)", n)
	}
	var p string
	if err := d.Pool().QueryRow(ctx, `SELECT payload FROM biz_effects WHERE message_id = 'm-1'`).Scan(&p); err != nil || p != `{"order_id":"1"}` {
		t.Fatalf("m-1 effect payload = %q, %v", p, err)
	}
	byID := map[string]dlq.Letter{}
	ls, _ := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	for _, l := range ls {
		byID[l.MessageID] = l
	}
	for id, class := range map[string]string{"m-1": "fingerprint_mismatch", "m-2": "invalid_input", "m-3": "invalid_input", "always-fails": "transient"} {
		if byID[id].ErrorClass != class {
			t.Errorf("%s: class %q, want %q (%+v)", id, byID[id].ErrorClass, class, byID[id])
		}
	}
	if l := byID["m-1"]; string(l.Payload) != `{"order_id":"1-changed"}` {
		t.Errorf("mismatch letter keeps payload %q, want the rejected one", l.Payload)
	}
	if l := byID["always-fails"]; l.Attempts != 3 {
		t.Errorf("always-fails parked after %d attempts, want 3", l.Attempts)
	}
	for name, want := range map[string]float64{
		"idem_fingerprint_conflicts_total|component=consumer,consumer=billing": 1,
		"idem_dead_letters_total|class=fingerprint_mismatch,consumer=billing":  1,
		"idem_dead_letters_total|class=invalid_input,consumer=billing":         2,
		"idem_dead_letters_total|class=transient,consumer=billing":             1,
		"idem_retries_total|consumer=billing":                                  2,
	} {
		metric, labels, _ := strings.Cut(name, "|")
		if got := value(t, reg, metric, labels); got != want {
			t.Errorf("%s{%s} = %v, want %v", metric, labels, got, want)
		}
	}
	if st := b.Stats(); st.Termed != 4 {
		t.Errorf("terminated deliveries = %d, want 4", st.Termed)
	}
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := consumer.Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	one := func() float64 { return 0.999999 }
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 10: time.Second} {
		if got := b.Delay(attempt, one); got > want || got < want*99/100 {
			t.Errorf("Delay(%d) = %v, want ≈%v", attempt, got, want)
		}
	}
	if got := b.Delay(3, func() float64 { return 0 }); got != 0 {
		t.Errorf("full jitter lower bound = %v", got)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	sub, _ := memBroker(t).Subscribe("s", "g")
	ib := newInbox(t, d)
	ok := func(ctx context.Context, tx *sqlTx, msg idem.Message) error { return nil }
	for name, cfg := range map[string]consumer.Config[*sqlTx]{
		"no name":    {Handler: ok},
		"no handler": {Name: "c"},
		"max < base": {Name: "c", Handler: ok, Backoff: consumer.Backoff{Base: time.Second, Max: time.Millisecond}},
	} {
		if _, err := consumer.New(ib, sub, cfg); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
}

// MessageID dedups on a business key: two events announcing one intent
// under different ids have one effect; an undecodable key is dead-lettered.
func TestBusinessKeyMessageID(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testBusinessKey(t, d.D) })
}

func testBusinessKey[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	reg, m := newMetrics(t)
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", BatchSize: 4, FetchWait: 50 * time.Millisecond, Observer: m, DLQ: letters,
		MessageID: func(msg idem.Message) (string, error) {
			order, ok := strings.CutPrefix(string(msg.Payload), "order:")
			if !ok {
				return "", errors.New("no order id in payload")
			}
			return "invoice:" + order, nil
		},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	pub := b.Publisher()
	for _, m := range []idem.Message{
		{ID: "evt-1", Subject: "orders", Payload: []byte("order:7")},
		{ID: "evt-2", Subject: "orders", Payload: []byte("order:7")}, // same intent, another event id
		{ID: "evt-3", Subject: "orders", Payload: []byte("garbage")},
	} {
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "one invoice, one duplicate, one dead letter", func() bool {
		n, _ := letters.CountParked(ctx)
		return effects(t, d, "invoice:7") == 1 && n["billing"] == 1 &&
			value(t, reg, "idem_duplicates_suppressed_total", "component=consumer,consumer=billing") == 1
	})
	ls, err := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	if err != nil || len(ls) != 1 || ls[0].MessageID != "evt-3" || ls[0].ErrorClass != "permanent" {
		t.Fatalf("dead letters %+v (%v), want evt-3 parked as permanent under its broker id", ls, err)
	}
}
