package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/store"
)

// A panic of Hooks.AfterCommit, which runs on a worker goroutine after the
// commit, is recovered and logged with its stack, and the delivery is
// acked as when the hook returns nil: each message is processed once and
// acked once, never redelivered, and the consumer goes on. One at a time,
// in batches settled concurrently, and in batches acked with one
// broker.BatchAcker call. Before, the panic killed the process.
func TestAfterCommitPanic(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"single", "batch", "batch-acker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testAfterCommitPanic(t, d.D, mode) })
		})
	}
}

func testAfterCommitPanic[TTx any](t *testing.T, d store.Driver[TTx], mode string) {
	ctx := context.Background()
	bizTable(t, d)
	// An ack wait longer than the test: only RedeliverNow below hands an
	// unacked delivery out again.
	b, err := memory.New(memory.Config{AckWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	raw, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	var sub broker.Subscriber = raw
	if mode == "batch-acker" {
		sub = &batchAcker{Subscriber: raw}
	}
	publish := func(id string) {
		t.Helper()
		if err := b.Publisher().Publish(ctx, idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Published before the consumer starts, so a batch fetch takes them all.
	for i := range 3 {
		publish(fmt.Sprintf("m-%d", i))
	}
	var mu sync.Mutex
	hooked := map[string]int{}
	logs := &testlog.Buffer{}
	cfg := consumer.Config[TTx]{
		Name: "billing", FetchWait: 20 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
		Hooks: consumer.Hooks{AfterCommit: func(msg idem.Message) error {
			mu.Lock()
			hooked[msg.ID]++
			mu.Unlock()
			panic("after-commit hook broke")
		}},
	}
	if mode != "single" {
		cfg.BatchSize = 8
	}
	c, err := consumer.New(newInbox(t, d), sub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	waitFor(t, "the three messages processed and acked", func() bool {
		return effects(t, d, "") == 3 && b.Pending("orders", "billing") == 0
	})
	// Anything left unacked would come back now, before the next message.
	b.RedeliverNow()
	publish("m-late")
	waitFor(t, "a later message processed and acked", func() bool {
		return effects(t, d, "m-late") == 1 && b.Pending("orders", "billing") == 0
	})
	for _, id := range []string{"m-0", "m-1", "m-2", "m-late"} {
		mu.Lock()
		n := hooked[id]
		mu.Unlock()
		if e := effects(t, d, id); e != 1 || n != 1 {
			t.Errorf("%s: %d effects, %d AfterCommit calls; want 1 and 1", id, e, n)
		}
	}
	if s := b.Stats(); s.Delivered != 4 || s.Redelivered != 0 || s.Acked != 4 || s.Naked != 0 || s.Termed != 0 {
		t.Errorf("broker stats %+v, want 4 deliveries acked once each, none redelivered", s)
	}
	out := logs.String()
	if !strings.Contains(out, `"msg":"AfterCommit hook panicked`) || !strings.Contains(out, "callbackpanic_test.go") {
		t.Errorf("no ERROR line with the hook's panic and stack in the logs:\n%.3000s", out)
	}
}

// panicky is an Observer whose every consumer method panics.
type panicky struct{ obs.NopObserver }

func (panicky) Start(string) func()                                 { panic("observer broke") }
func (panicky) Processed(string)                                    { panic("observer broke") }
func (panicky) DuplicateContext(context.Context, string, string)    { panic("observer broke") }
func (panicky) FingerprintConflict(string, string)                  { panic("observer broke") }
func (panicky) Failed(string, string)                               { panic("observer broke") }
func (panicky) Retry(string)                                        { panic("observer broke") }
func (panicky) DeadLetteredContext(context.Context, string, string) { panic("observer broke") }
func (panicky) Unidentified(string)                                 { panic("observer broke") }

// A panicking Observer (user code, called on the worker goroutines) does
// not kill the process nor change how deliveries are settled: a good
// message is processed and acked, a retried one processed on its second
// attempt, a poison one dead-lettered, a duplicate acked.
// The function Start returns is called after the handler, through
// another path: its panic is recovered too.
func TestObserverPanic(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]idem.Observer{"every method": panicky{}, "the end of Start": panickyEnd{}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testObserverPanic(t, d.D, o) })
		})
	}
}

// panickyEnd is an Observer whose Start returns a function that panics.
type panickyEnd struct{ obs.NopObserver }

func (panickyEnd) Start(string) func() { return func() { panic("observer's end broke") } }

func testObserverPanic[TTx any](t *testing.T, d store.Driver[TTx], o idem.Observer) {
	ctx := context.Background()
	bizTable(t, d)
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", FetchWait: 20 * time.Millisecond, DLQ: letters, MaxAttempts: 3, Observer: o,
		Backoff: consumer.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			switch {
			case msg.ID == "poison":
				return idem.Permanent(errors.New("bad order"))
			case msg.ID == "flaky" && msg.Attempt < 2:
				return errors.New("database hiccup")
			}
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	for _, id := range []string{"ok", "flaky", "poison", "ok"} {
		if err := b.Publisher().Publish(ctx, idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every delivery settled", func() bool {
		parked, _ := letters.CountParked(ctx)
		return parked["billing"] == 1 && effects(t, d, "") == 2 && b.Pending("orders", "billing") == 0
	})
	if effects(t, d, "ok") != 1 || effects(t, d, "flaky") != 1 {
		t.Errorf("effects ok=%d flaky=%d, want 1 each", effects(t, d, "ok"), effects(t, d, "flaky"))
	}
}

// A panic of Config.Reroute (a Rerouter is user code too) is an error of
// Reroute: the delivery goes back to the broker, and its next failure is
// rerouted. Before, the panic killed the process.
func TestReroutePanic(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testReroutePanic(t, d.D) })
}

// panicOnce is a Rerouter whose first call panics; later calls take the
// message over.
type panicOnce struct {
	mu    sync.Mutex
	calls int
}

func (r *panicOnce) Reroute(context.Context, idem.Message, error) error {
	r.mu.Lock()
	r.calls++
	n := r.calls
	r.mu.Unlock()
	if n == 1 {
		panic("retry topic client broke")
	}
	return nil
}

func (r *panicOnce) n() int { r.mu.Lock(); defer r.mu.Unlock(); return r.calls }

func testReroutePanic[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	r := &panicOnce{}
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", FetchWait: 20 * time.Millisecond, MaxAttempts: 5, Reroute: r,
		Backoff: consumer.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
		Handler: func(context.Context, TTx, idem.Message) error { return errors.New("down") },
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if err := b.Publisher().Publish(ctx, idem.Message{ID: "m-1", Subject: "orders", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message rerouted and acked after the panic", func() bool {
		return r.n() == 2 && b.Pending("orders", "billing") == 0
	})
	if s := b.Stats(); s.Naked != 1 || s.Acked != 1 {
		t.Errorf("broker stats %+v, want one Nak (after the panic) and one Ack (after the reroute)", s)
	}
}
