package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/store"
)

// TestHandlerPanic: a message whose handler always panics (after writing)
// is recovered, its writes rolled back, retried like an error and
// dead-lettered after MaxAttempts with class "panic", counted and logged
// with the stack, while the process goes on serving the other messages.
// Before, the panic killed the process: the message crash-looped it and
// was never dead-lettered.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"single", "batch", "batch-handler"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testHandlerPanic(t, d.D, mode) })
		})
	}
}

func testHandlerPanic[TTx any](t *testing.T, d store.Driver[TTx], mode string) {
	ctx := context.Background()
	bizTable(t, d)
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	reg, m := newMetrics(t)
	letters, _ := dlq.New(d, dlq.Config{})
	logs := &testlog.Buffer{}
	handler := func(ctx context.Context, tx TTx, msg idem.Message) error {
		if err := record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload); err != nil {
			return err
		}
		if msg.ID == "poison" {
			var orders map[string]int
			orders["poison"]++ // a nil map: panics after the write above
		}
		return nil
	}
	cfg := consumer.Config[TTx]{
		Name: "billing", FetchWait: 20 * time.Millisecond, Observer: m, DLQ: letters, MaxAttempts: 3,
		Backoff: consumer.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Logger:  slog.New(slog.NewJSONHandler(logs, nil)), Handler: handler,
	}
	if mode != "single" {
		cfg.BatchSize = 8
	}
	if mode == "batch-handler" {
		cfg.BatchHandler = func(ctx context.Context, tx TTx, msgs []idem.Message) error {
			for _, msg := range msgs {
				if err := handler(ctx, tx, msg); err != nil {
					return err
				}
			}
			return nil
		}
	}
	c, err := consumer.New(newInbox(t, d), sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	pub := b.Publisher()
	publish := func(id string) {
		t.Helper()
		if err := pub.Publish(ctx, idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("poison")
	for i := range 5 {
		publish(fmt.Sprintf("ok-%d", i))
	}
	waitFor(t, "the poison message parked and the others processed", func() bool {
		n, _ := letters.CountParked(ctx)
		return n["billing"] == 1 && value(t, reg, "idem_messages_processed_total", "consumer=billing") == 5
	})
	// Still serving after the panics.
	publish("ok-late")
	waitFor(t, "a later message processed", func() bool { return effects(t, d, "ok-late") == 1 })
	if n := effects(t, d, "poison"); n != 0 {
		t.Errorf("poison's write committed %d times, want rolled back", n)
	}
	ls, err := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("letters %v, %v", ls, err)
	}
	if l := ls[0]; l.MessageID != "poison" || l.ErrorClass != "panic" || l.Attempts != 3 ||
		!strings.Contains(l.Error, "assignment to entry in nil map") {
		t.Errorf("letter %+v, want poison, class panic, 3 attempts, the panic's value in the error", l)
	}
	for name, want := range map[string]float64{
		"idem_messages_failed_total|class=panic,consumer=billing": 3,
		"idem_dead_letters_total|class=panic,consumer=billing":    1,
		"idem_retries_total|consumer=billing":                     2,
	} {
		metric, labels, _ := strings.Cut(name, "|")
		if got := value(t, reg, metric, labels); got != want {
			t.Errorf("%s{%s} = %v, want %v", metric, labels, got, want)
		}
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"handler panicked`) || !strings.Contains(out, "panic_test.go") || !strings.Contains(out, `"stack":"goroutine`) {
		t.Errorf("no ERROR line with the panic's stack in the logs:\n%.3000s", out)
	}
}

// A panic of Config.MessageID (user code too) is recovered: the message is
// dead-lettered at once, class "panic", as MessageID's errors are
// permanent, and the other messages are processed.
func TestMessageIDPanic(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testMessageIDPanic(t, d.D) })
}

func testMessageIDPanic[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", FetchWait: 20 * time.Millisecond, DLQ: letters, MaxAttempts: 3,
		MessageID: func(m idem.Message) (string, error) {
			if string(m.Payload) == "bad" {
				panic("no order id")
			}
			return "order:" + string(m.Payload), nil
		},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	for i, p := range []string{"bad", "1", "2"} {
		if err := b.Publisher().Publish(ctx, idem.Message{ID: fmt.Sprintf("m-%d", i), Subject: "orders", Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the bad message parked, the others processed", func() bool {
		n, _ := letters.CountParked(ctx)
		return n["billing"] == 1 && effects(t, d, "") == 2
	})
	ls, _ := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	if len(ls) != 1 || ls[0].ErrorClass != "panic" || ls[0].Attempts != 1 || !strings.Contains(ls[0].Error, "no order id") {
		t.Errorf("letters %+v, want one of class panic after 1 attempt", ls)
	}
}

// A panic of Config.Validate (user code, like MessageID) is recovered: the
// message is dead-lettered at once, class "panic", and the other messages
// are processed, one at a time and in batches. Before, the panic killed the
// process on a worker goroutine, and the redelivered message killed it
// again after every restart.
func TestValidatePanic(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 8} {
		t.Run(fmt.Sprintf("batch%d", batch), func(t *testing.T) {
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testValidatePanic(t, d.D, batch) })
		})
	}
}

func testValidatePanic[TTx any](t *testing.T, d store.Driver[TTx], batch int) {
	ctx := context.Background()
	bizTable(t, d)
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", FetchWait: 20 * time.Millisecond, DLQ: letters, MaxAttempts: 3, BatchSize: batch,
		Validate: func(p []byte) error {
			if string(p) == "bad" {
				var fields []string
				_ = fields[3] // a decoder's index out of range
			}
			return nil
		},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	for i, p := range []string{"1", "bad", "2"} {
		if err := b.Publisher().Publish(ctx, idem.Message{ID: fmt.Sprintf("m-%d", i), Subject: "orders", Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the bad message parked, the others processed", func() bool {
		n, _ := letters.CountParked(ctx)
		return n["billing"] == 1 && effects(t, d, "") == 2
	})
	ls, _ := letters.List(ctx, dlq.Filter{Consumer: "billing"})
	if len(ls) != 1 || ls[0].MessageID != "m-1" || ls[0].ErrorClass != "panic" || ls[0].Attempts != 1 || !strings.Contains(ls[0].Error, "index out of range") {
		t.Errorf("letters %+v, want m-1's, of class panic after 1 attempt", ls)
	}
}
